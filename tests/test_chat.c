/* test_chat.c — chat templates (Llama 3 / Qwen3 ChatML / Llama 2), tool-call rendering and parsing. */
#include <jansson.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "tokenizer/chat.h"

/* Expected prompts below were produced by rendering the real Jinja templates
 * (Qwen3's tokenizer_config.json template; Meta's Llama 3 template and the
 * Llama 3.2 tool template with date_string "26 Jul 2024") with Python
 * jinja2 the way HF transformers does (trim_blocks, lstrip_blocks, tojson =
 * json.dumps(ensure_ascii=False)), tool-call arguments passed as objects. */

/* expected: l3_sys_user */
static const char k_L3_SYS_USER[] =
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n"
        "\n"
        "You are a helpful assistant.<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
        "\n"
        "Hello!<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
        "\n";
/* expected: qw_sys_user */
static const char k_QW_SYS_USER[] =
        "<|im_start|>system\n"
        "You are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\n"
        "Hello!<|im_end|>\n"
        "<|im_start|>assistant\n";
/* expected: l3_multi_noagp */
static const char k_L3_MULTI_NOAGP[] =
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n"
        "\n"
        "Be brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
        "\n"
        "Hi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
        "\n"
        "Hello! How can I help?<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
        "\n"
        "What is 2+2?<|eot_id|>";
/* expected: qw_multi */
static const char k_QW_MULTI[] =
        "<|im_start|>user\n"
        "Hi<|im_end|>\n"
        "<|im_start|>assistant\n"
        "Hello!<|im_end|>\n"
        "<|im_start|>user\n"
        "What is 2+2?<|im_end|>\n"
        "<|im_start|>assistant\n"
        "<think>\n"
        "Easy.\n"
        "</think>\n"
        "\n"
        "4<|im_end|>\n";
/* expected: l3_tools_user */
static const char k_L3_TOOLS_USER[] =
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n"
        "\n"
        "Environment: ipython\n"
        "Cutting Knowledge Date: December 2023\n"
        "Today Date: 26 Jul 2024\n"
        "\n"
        "You are a weather bot.<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
        "\n"
        "Given the following functions, please respond with a JSON for a function call with its proper arguments that best answers the given prompt.\n"
        "\n"
        "Respond in the format {\"name\": function name, \"parameters\": dictionary of argument name and its value}.Do not use variables.\n"
        "\n"
        "{\n"
        "    \"type\": \"function\",\n"
        "    \"function\": {\n"
        "        \"name\": \"get_weather\",\n"
        "        \"description\": \"Get the current weather for a city.\",\n"
        "        \"parameters\": {\n"
        "            \"type\": \"object\",\n"
        "            \"properties\": {\n"
        "                \"city\": {\n"
        "                    \"type\": \"string\",\n"
        "                    \"description\": \"City name, e.g. Paris\"\n"
        "                },\n"
        "                \"unit\": {\n"
        "                    \"type\": \"string\",\n"
        "                    \"enum\": [\n"
        "                        \"celsius\",\n"
        "                        \"fahrenheit\"\n"
        "                    ]\n"
        "                }\n"
        "            },\n"
        "            \"required\": [\n"
        "                \"city\"\n"
        "            ]\n"
        "        }\n"
        "    }\n"
        "}\n"
        "\n"
        "Weather in Paris?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
        "\n";
/* expected: qw_tools_user */
static const char k_QW_TOOLS_USER[] =
        "<|im_start|>system\n"
        "You are a weather bot.\n"
        "\n"
        "# Tools\n"
        "\n"
        "You may call one or more functions to assist with the user query.\n"
        "\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n"
        "<tools>\n"
        "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Get the current weather for a city.\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\", \"description\": \"City name, e.g. Paris\"}, \"unit\": {\"type\": \"string\", \"enum\": [\"celsius\", \"fahrenheit\"]}}, \"required\": [\"city\"]}}}\n"
        "</tools>\n"
        "\n"
        "For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n"
        "<tool_call>\n"
        "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n"
        "</tool_call><|im_end|>\n"
        "<|im_start|>user\n"
        "Weather in Paris?<|im_end|>\n"
        "<|im_start|>assistant\n";
/* expected: l3_call_result */
static const char k_L3_CALL_RESULT[] =
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n"
        "\n"
        "Environment: ipython\n"
        "Cutting Knowledge Date: December 2023\n"
        "Today Date: 26 Jul 2024\n"
        "\n"
        "<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
        "\n"
        "Given the following functions, please respond with a JSON for a function call with its proper arguments that best answers the given prompt.\n"
        "\n"
        "Respond in the format {\"name\": function name, \"parameters\": dictionary of argument name and its value}.Do not use variables.\n"
        "\n"
        "{\n"
        "    \"type\": \"function\",\n"
        "    \"function\": {\n"
        "        \"name\": \"get_weather\",\n"
        "        \"description\": \"Get the current weather for a city.\",\n"
        "        \"parameters\": {\n"
        "            \"type\": \"object\",\n"
        "            \"properties\": {\n"
        "                \"city\": {\n"
        "                    \"type\": \"string\",\n"
        "                    \"description\": \"City name, e.g. Paris\"\n"
        "                },\n"
        "                \"unit\": {\n"
        "                    \"type\": \"string\",\n"
        "                    \"enum\": [\n"
        "                        \"celsius\",\n"
        "                        \"fahrenheit\"\n"
        "                    ]\n"
        "                }\n"
        "            },\n"
        "            \"required\": [\n"
        "                \"city\"\n"
        "            ]\n"
        "        }\n"
        "    }\n"
        "}\n"
        "\n"
        "Weather in Paris?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
        "\n"
        "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n"
        "\n"
        "{\"temperature\": 21.5, \"sky\": \"clear\"}<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
        "\n"
        "It is 21.5 °C and clear in Paris.<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
        "\n"
        "Thanks!<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
        "\n";
/* expected: qw_call_result */
static const char k_QW_CALL_RESULT[] =
        "<|im_start|>system\n"
        "# Tools\n"
        "\n"
        "You may call one or more functions to assist with the user query.\n"
        "\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n"
        "<tools>\n"
        "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Get the current weather for a city.\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\", \"description\": \"City name, e.g. Paris\"}, \"unit\": {\"type\": \"string\", \"enum\": [\"celsius\", \"fahrenheit\"]}}, \"required\": [\"city\"]}}}\n"
        "</tools>\n"
        "\n"
        "For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n"
        "<tool_call>\n"
        "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n"
        "</tool_call><|im_end|>\n"
        "<|im_start|>user\n"
        "Weather in Paris and Rome?<|im_end|>\n"
        "<|im_start|>assistant\n"
        "Let me check both.\n"
        "<tool_call>\n"
        "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
        "</tool_call>\n"
        "<tool_call>\n"
        "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\", \"unit\": \"celsius\"}}\n"
        "</tool_call><|im_end|>\n"
        "<|im_start|>user\n"
        "<tool_response>\n"
        "{\"temperature\": 21.5}\n"
        "</tool_response>\n"
        "<tool_response>\n"
        "{\"temperature\": 25}\n"
        "</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n"
        "Paris: 21.5 °C, Rome: 25 °C.<|im_end|>\n"
        "<|im_start|>user\n"
        "Thanks!<|im_end|>\n"
        "<|im_start|>assistant\n";
/* expected: qw_loop */
static const char k_QW_LOOP[] =
        "<|im_start|>system\n"
        "# Tools\n"
        "\n"
        "You may call one or more functions to assist with the user query.\n"
        "\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n"
        "<tools>\n"
        "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Get the current weather for a city.\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\", \"description\": \"City name, e.g. Paris\"}, \"unit\": {\"type\": \"string\", \"enum\": [\"celsius\", \"fahrenheit\"]}}, \"required\": [\"city\"]}}}\n"
        "</tools>\n"
        "\n"
        "For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n"
        "<tool_call>\n"
        "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n"
        "</tool_call><|im_end|>\n"
        "<|im_start|>user\n"
        "Weather in Paris?<|im_end|>\n"
        "<|im_start|>assistant\n"
        "<think>\n"
        "I should call the tool.\n"
        "</think>\n"
        "\n"
        "<tool_call>\n"
        "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
        "</tool_call><|im_end|>\n"
        "<|im_start|>user\n"
        "<tool_response>\n"
        "sunny\n"
        "</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n"
        "<think>\n"
        "\n"
        "</think>\n"
        "\n";
/* expected: qw_nothink */
static const char k_QW_NOTHINK[] =
        "<|im_start|>user\n"
        "Hi<|im_end|>\n"
        "<|im_start|>assistant\n"
        "<think>\n"
        "\n"
        "</think>\n"
        "\n";

static const char k_WEATHER_TOOLS[] =
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", "
    "\"description\": \"Get the current weather for a city.\", \"parameters\": "
    "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\", "
    "\"description\": \"City name, e.g. Paris\"}, \"unit\": {\"type\": \"string\", "
    "\"enum\": [\"celsius\", \"fahrenheit\"]}}, \"required\": [\"city\"]}}}]";

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

/* Renders and asserts the exact text. */
static void expect_render(rp_chat_format f, const rp_chat_msg *m, size_t n,
                          const rp_chat_opts *o, const char *want) {
    char *out = NULL;
    rp_status st = rp_chat_apply(f, m, n, o, &out);
    if (st != RP_OK) print_message("rp_chat_apply: %s\n", rp_last_error());
    assert_int_equal(st, RP_OK);
    assert_non_null(out);
    assert_string_equal(out, want);
    free(out);
}

/* ---- detection ---------------------------------------------------------- */

/* Reads tokenizer.chat_template out of a HF tokenizer_config.json. */
static char *load_template(const char *rel) {
    const char *path = rp_test_shared(rel);
    if (!path) return NULL;
    json_error_t err;
    /* INT_AS_REAL: model_max_length (1e30) does not fit jansson's integers. */
    json_t *cfg = json_load_file(path, JSON_DECODE_INT_AS_REAL, &err);
    if (!cfg) print_message("%s: %s (line %d)\n", path, err.text, err.line);
    assert_non_null(cfg);
    const char *tpl = json_string_value(json_object_get(cfg, "chat_template"));
    assert_non_null(tpl);
    char *copy = strdup(tpl);
    json_decref(cfg);
    return copy;
}

static void test_detect_real_templates(void **state) {
    (void)state;
    const char *rel = "models/tokenizers/qwen3/tokenizer_config.json";
    RP_REQUIRE_SHARED(rp_test_shared(rel), rel);
    char *qwen = load_template(rel);
    assert_int_equal(rp_chat_detect(qwen), RP_CHAT_CHATML);
    free(qwen);

    rel = "models/tokenizers/llama3/tokenizer_config.json";
    RP_REQUIRE_SHARED(rp_test_shared(rel), rel);
    char *llama = load_template(rel);
    assert_int_equal(rp_chat_detect(llama), RP_CHAT_LLAMA3);
    free(llama);
}

static void test_detect_markers(void **state) {
    (void)state;
    assert_int_equal(rp_chat_detect(NULL), RP_CHAT_UNKNOWN);
    assert_int_equal(rp_chat_detect(""), RP_CHAT_UNKNOWN);
    assert_int_equal(rp_chat_detect("{{ messages }}"), RP_CHAT_UNKNOWN);
    assert_int_equal(rp_chat_detect("{{ bos_token + '[INST] ' + m + ' [/INST]' }}"),
                     RP_CHAT_LLAMA2);
    assert_int_equal(rp_chat_detect("{{'<|im_start|>' + role}}"), RP_CHAT_CHATML);
    assert_int_equal(rp_chat_detect("<|start_header_id|>x"), RP_CHAT_LLAMA3);
    assert_string_equal(rp_chat_format_name(RP_CHAT_LLAMA3), "llama3");
    assert_string_equal(rp_chat_format_name(RP_CHAT_CHATML), "chatml");
    assert_string_equal(rp_chat_format_name(RP_CHAT_LLAMA2), "llama2");
    assert_string_equal(rp_chat_format_name(RP_CHAT_UNKNOWN), "unknown");
    assert_string_equal(rp_chat_format_name((rp_chat_format)42), "unknown");
}

/* ---- plain conversations ------------------------------------------------ */

static const rp_chat_msg k_sys_user[] = {
    {.role = "system", .content = "You are a helpful assistant."},
    {.role = "user", .content = "Hello!"},
};

static void test_llama3_system_user(void **state) {
    (void)state;
    rp_chat_opts o = {.add_generation_prompt = true, .bos_text = "<|begin_of_text|>"};
    expect_render(RP_CHAT_LLAMA3, k_sys_user, N_OF(k_sys_user), &o, k_L3_SYS_USER);
}

static void test_chatml_system_user(void **state) {
    (void)state;
    rp_chat_opts o = {.add_generation_prompt = true, .enable_thinking = true};
    expect_render(RP_CHAT_CHATML, k_sys_user, N_OF(k_sys_user), &o, k_QW_SYS_USER);
}

static void test_llama3_multi_turn(void **state) {
    (void)state;
    const rp_chat_msg m[] = {
        {.role = "system", .content = "Be brief."},
        {.role = "user", .content = "Hi"},
        {.role = "assistant", .content = "Hello! How can I help?"},
        {.role = "user", .content = "  What is 2+2?\n"}, /* `| trim` */
    };
    rp_chat_opts o = {.bos_text = "<|begin_of_text|>"};
    expect_render(RP_CHAT_LLAMA3, m, N_OF(m), &o, k_L3_MULTI_NOAGP);
}

static void test_chatml_multi_turn_reasoning(void **state) {
    (void)state;
    /* Reasoning of turns before the last user query is dropped; the final
     * assistant turn keeps its <think> block. */
    const rp_chat_msg m[] = {
        {.role = "user", .content = "Hi"},
        {.role = "assistant", .content = "<think>\nThe user greets me.\n</think>\n\nHello!"},
        {.role = "user", .content = "What is 2+2?"},
        {.role = "assistant", .content = "<think>\nEasy.\n</think>\n\n4"},
    };
    rp_chat_opts o = {.enable_thinking = true};
    expect_render(RP_CHAT_CHATML, m, N_OF(m), &o, k_QW_MULTI);
}

static void test_chatml_thinking_disabled(void **state) {
    (void)state;
    const rp_chat_msg m[] = {{.role = "user", .content = "Hi"}};
    rp_chat_opts o = {.add_generation_prompt = true, .enable_thinking = false};
    expect_render(RP_CHAT_CHATML, m, N_OF(m), &o, k_QW_NOTHINK);
    /* NULL opts: defaults, no generation prompt. */
    expect_render(RP_CHAT_CHATML, m, N_OF(m), NULL, "<|im_start|>user\nHi<|im_end|>\n");
}

static void test_llama2(void **state) {
    (void)state;
    const rp_chat_msg m[] = {
        {.role = "system", .content = "Sys"},
        {.role = "user", .content = " Hi "},
        {.role = "assistant", .content = "Hello"},
        {.role = "user", .content = "Bye"},
    };
    rp_chat_opts o = {.bos_text = "<s>", .add_generation_prompt = true};
    expect_render(RP_CHAT_LLAMA2, m, N_OF(m), &o,
                  "<s>[INST] <<SYS>>\nSys\n<</SYS>>\n\n Hi [/INST] Hello </s><s>[INST] Bye [/INST]");
    char *out = NULL;
    const rp_chat_msg bad[] = {{.role = "user", .content = "a"}, {.role = "user", .content = "b"}};
    assert_int_equal(rp_chat_apply(RP_CHAT_LLAMA2, bad, 2, &o, &out), RP_ERR_INVALID_ARG);
    assert_null(out);
    assert_non_null(strstr(rp_last_error(), "message 1"));
}

/* ---- tools ---------------------------------------------------------------- */

static const rp_chat_msg k_tools_user[] = {
    {.role = "system", .content = "You are a weather bot."},
    {.role = "user", .content = "Weather in Paris?"},
};

static void test_llama3_tools_user(void **state) {
    (void)state;
    rp_chat_opts o = {.tools_json = k_WEATHER_TOOLS, .add_generation_prompt = true,
                      .bos_text = "<|begin_of_text|>"};
    expect_render(RP_CHAT_LLAMA3, k_tools_user, N_OF(k_tools_user), &o, k_L3_TOOLS_USER);
}

static void test_chatml_tools_user(void **state) {
    (void)state;
    rp_chat_opts o = {.tools_json = k_WEATHER_TOOLS, .add_generation_prompt = true,
                      .enable_thinking = true};
    expect_render(RP_CHAT_CHATML, k_tools_user, N_OF(k_tools_user), &o, k_QW_TOOLS_USER);
    /* An empty tool list is no tools for Qwen ({% if tools %}). */
    o.tools_json = "[]";
    expect_render(RP_CHAT_CHATML, k_tools_user, N_OF(k_tools_user), &o,
                  "<|im_start|>system\nYou are a weather bot.<|im_end|>\n"
                  "<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n");
}

static void test_llama3_call_and_result(void **state) {
    (void)state;
    /* Arguments arrive compact (as the parser returns them); the template's
     * tojson re-spaces them. */
    const rp_tool_call call = {.id = "call_1", .name = "get_weather",
                               .arguments = "{\"city\":\"Paris\",\"unit\":\"celsius\"}"};
    const rp_chat_msg m[] = {
        {.role = "user", .content = "Weather in Paris?"},
        {.role = "assistant", .content = NULL, .tool_calls = &call, .n_tool_calls = 1},
        {.role = "tool", .content = "{\"temperature\": 21.5, \"sky\": \"clear\"}",
         .tool_call_id = "call_1", .name = "get_weather"},
        {.role = "assistant", .content = "It is 21.5 °C and clear in Paris."},
        {.role = "user", .content = "Thanks!"},
    };
    rp_chat_opts o = {.tools_json = k_WEATHER_TOOLS, .add_generation_prompt = true,
                      .bos_text = "<|begin_of_text|>"};
    expect_render(RP_CHAT_LLAMA3, m, N_OF(m), &o, k_L3_CALL_RESULT);
}

static void test_chatml_calls_and_results(void **state) {
    (void)state;
    const rp_tool_call calls[] = {
        {.name = "get_weather", .arguments = "{\"city\":\"Paris\"}"},
        {.name = "get_weather", .arguments = "{\"city\": \"Rome\", \"unit\": \"celsius\"}"},
    };
    const rp_chat_msg m[] = {
        {.role = "user", .content = "Weather in Paris and Rome?"},
        {.role = "assistant", .content = "Let me check both.", .tool_calls = calls,
         .n_tool_calls = 2},
        {.role = "tool", .content = "{\"temperature\": 21.5}"},
        {.role = "tool", .content = "{\"temperature\": 25}"},
        {.role = "assistant", .content = "Paris: 21.5 °C, Rome: 25 °C."},
        {.role = "user", .content = "Thanks!"},
    };
    rp_chat_opts o = {.tools_json = k_WEATHER_TOOLS, .add_generation_prompt = true,
                      .enable_thinking = true};
    expect_render(RP_CHAT_CHATML, m, N_OF(m), &o, k_QW_CALL_RESULT);
}

static void test_chatml_agent_loop_no_thinking(void **state) {
    (void)state;
    const rp_tool_call call = {.name = "get_weather", .arguments = "{\"city\":\"Paris\"}"};
    const rp_chat_msg m[] = {
        {.role = "user", .content = "Weather in Paris?"},
        {.role = "assistant", .content = "<think>\nI should call the tool.\n</think>\n\n",
         .tool_calls = &call, .n_tool_calls = 1},
        {.role = "tool", .content = "sunny"},
    };
    rp_chat_opts o = {.tools_json = k_WEATHER_TOOLS, .add_generation_prompt = true};
    expect_render(RP_CHAT_CHATML, m, N_OF(m), &o, k_QW_LOOP);
}

/* ---- bad input -------------------------------------------------------------- */

static void test_bad_input(void **state) {
    (void)state;
    char *out = NULL;
    const rp_chat_msg unknown[] = {{.role = "user", .content = "a"},
                                   {.role = "bot", .content = "b"}};
    for (int f = RP_CHAT_LLAMA3; f <= RP_CHAT_LLAMA2; f++) {
        assert_int_equal(rp_chat_apply((rp_chat_format)f, unknown, 2, NULL, &out),
                         RP_ERR_INVALID_ARG);
        assert_null(out);
        assert_non_null(strstr(rp_last_error(), "message 1"));
        assert_non_null(strstr(rp_last_error(), "bot"));
    }
    const rp_chat_msg norole[] = {{.role = NULL, .content = "a"}};
    assert_int_equal(rp_chat_apply(RP_CHAT_CHATML, norole, 1, NULL, &out), RP_ERR_INVALID_ARG);

    rp_chat_opts o = {.tools_json = "{\"type\": \"function\"}"};
    assert_int_equal(rp_chat_apply(RP_CHAT_CHATML, unknown, 1, &o, &out), RP_ERR_INVALID_ARG);
    assert_non_null(strstr(rp_last_error(), "tools_json"));
    o.tools_json = "[{\"type\": ";
    assert_int_equal(rp_chat_apply(RP_CHAT_LLAMA3, unknown, 1, &o, &out), RP_ERR_INVALID_ARG);
    assert_non_null(strstr(rp_last_error(), "tools_json"));
    assert_null(out);

    /* Llama 3's template takes exactly one call per assistant message. */
    const rp_tool_call two[] = {{.name = "a"}, {.name = "b"}};
    const rp_chat_msg multi[] = {{.role = "user", .content = "x"},
                                 {.role = "assistant", .tool_calls = two, .n_tool_calls = 2}};
    assert_int_equal(rp_chat_apply(RP_CHAT_LLAMA3, multi, 2, NULL, &out), RP_ERR_INVALID_ARG);
    assert_non_null(strstr(rp_last_error(), "message 1"));
    /* Tool calls only on assistant messages; a call needs a name. */
    const rp_chat_msg on_user[] = {{.role = "user", .tool_calls = two, .n_tool_calls = 1}};
    assert_int_equal(rp_chat_apply(RP_CHAT_CHATML, on_user, 1, NULL, &out), RP_ERR_INVALID_ARG);
    const rp_tool_call noname = {.arguments = "{}"};
    const rp_chat_msg nn[] = {{.role = "assistant", .tool_calls = &noname, .n_tool_calls = 1}};
    assert_int_equal(rp_chat_apply(RP_CHAT_CHATML, nn, 1, NULL, &out), RP_ERR_INVALID_ARG);
    /* Llama 3 tools need a user message to go into. */
    o.tools_json = "[]";
    const rp_chat_msg sys_only[] = {{.role = "system", .content = "s"}};
    assert_int_equal(rp_chat_apply(RP_CHAT_LLAMA3, sys_only, 1, &o, &out), RP_ERR_INVALID_ARG);

    assert_int_equal(rp_chat_apply(RP_CHAT_UNKNOWN, unknown, 1, NULL, &out), RP_ERR_UNSUPPORTED);
    assert_int_equal(rp_chat_apply((rp_chat_format)9, unknown, 1, NULL, &out),
                     RP_ERR_INVALID_ARG);
    assert_int_equal(rp_chat_apply(RP_CHAT_CHATML, NULL, 1, NULL, &out), RP_ERR_INVALID_ARG);
    assert_int_equal(rp_chat_apply(RP_CHAT_CHATML, unknown, 1, NULL, NULL), RP_ERR_INVALID_ARG);
    assert_null(out);
}

static void test_null_content(void **state) {
    (void)state;
    const rp_tool_call call = {.name = "f", .arguments = NULL};
    const rp_chat_msg m[] = {
        {.role = "system", .content = NULL},
        {.role = "user", .content = NULL},
        {.role = "assistant", .content = NULL},
        {.role = "assistant", .content = NULL, .tool_calls = &call, .n_tool_calls = 1},
        {.role = "tool", .content = NULL},
    };
    rp_chat_opts o = {.tools_json = "[]", .add_generation_prompt = true};
    expect_render(RP_CHAT_CHATML, m, N_OF(m), &o,
                  "<|im_start|>system\n<|im_end|>\n<|im_start|>user\n<|im_end|>\n"
                  "<|im_start|>assistant\n<|im_end|>\n"
                  "<|im_start|>assistant\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n"
                  "</tool_call><|im_end|>\n"
                  "<|im_start|>user\n<tool_response>\n\n</tool_response><|im_end|>\n"
                  "<|im_start|>assistant\n<think>\n\n</think>\n\n");
    char *out = NULL;
    for (int f = RP_CHAT_LLAMA3; f <= RP_CHAT_CHATML; f++) {
        assert_int_equal(rp_chat_apply((rp_chat_format)f, m, N_OF(m), &o, &out), RP_OK);
        free(out);
        out = NULL;
    }
    /* Zero messages. */
    expect_render(RP_CHAT_LLAMA3, NULL, 0, &(rp_chat_opts){.add_generation_prompt = true},
                  "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

/* ---- tojson ----------------------------------------------------------------- */

static void test_tojson_matches_python(void **state) {
    (void)state;
    char *out = NULL;
    /* json.dumps(obj, ensure_ascii=False) */
    assert_int_equal(rp_chat_tojson("{\"b\":[1,0.1,1e16,1E-5,100000.0,-0.0,true,null],"
                                    "\"a\":\"\\u00e9\\u0001\\t/\\\"\",\"e\":{}}",
                                    -1, false, &out),
                     RP_OK);
    assert_string_equal(out, "{\"b\": [1, 0.1, 1e+16, 1e-05, 100000.0, -0.0, true, null], "
                             "\"a\": \"é\\u0001\\t/\\\"\", \"e\": {}}");
    free(out);
    assert_int_equal(rp_chat_tojson("{\"a\": [1, {\"b\": []}]}", 2, false, &out), RP_OK);
    assert_string_equal(out, "{\n  \"a\": [\n    1,\n    {\n      \"b\": []\n    }\n  ]\n}");
    free(out);
    assert_int_equal(rp_chat_tojson("{\"a\": [1, 2.50]}", -1, true, &out), RP_OK);
    assert_string_equal(out, "{\"a\":[1,2.5]}");
    free(out);
    assert_int_equal(rp_chat_tojson("{\"a\": ", -1, true, &out), RP_ERR_FORMAT);
    assert_null(out);
}

/* ---- parsing generated text ------------------------------------------------ */

static void assert_call_id(const char *id) {
    assert_non_null(id);
    assert_int_equal(strlen(id), 29);
    assert_memory_equal(id, "call_", 5);
    for (size_t i = 5; i < 29; i++)
        assert_true((id[i] >= 'a' && id[i] <= 'z') || (id[i] >= 'A' && id[i] <= 'Z') ||
                    (id[i] >= '0' && id[i] <= '9'));
}

/* Renders [user, assistant(call)] and returns the assistant turn's text
 * (between `open` and `close`), i.e. what the model would have generated. */
static char *rendered_reply(rp_chat_format f, const rp_tool_call *call, const char *content,
                            const char *open, const char *close) {
    const rp_chat_msg m[] = {
        {.role = "user", .content = "Weather in Paris?"},
        {.role = "assistant", .content = content, .tool_calls = call, .n_tool_calls = 1},
    };
    rp_chat_opts o = {.tools_json = k_WEATHER_TOOLS, .bos_text = NULL};
    char *out = NULL;
    assert_int_equal(rp_chat_apply(f, m, 2, &o, &out), RP_OK);
    char *start = out, *p;
    while ((p = strstr(start, open)) != NULL) start = p + strlen(open);
    char *end = strstr(start, close);
    assert_non_null(end);
    char *reply = strndup(start, (size_t)(end - start));
    free(out);
    return reply;
}

static void test_parse_round_trip_chatml(void **state) {
    (void)state;
    const rp_tool_call call = {.name = "get_weather",
                               .arguments = "{\"city\":\"Paris\",\"days\":[1,2.5],\"x\":\"é\\\"\"}"};
    char *reply = rendered_reply(RP_CHAT_CHATML, &call, "Checking.", "<|im_start|>assistant\n",
                                 "<|im_end|>");
    /* The last assistant turn after the query is wrapped in an empty think block. */
    assert_string_equal(reply, "<think>\n\n</think>\n\nChecking.\n<tool_call>\n"
                               "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
                               "\"days\": [1, 2.5], \"x\": \"é\\\"\"}}\n</tool_call>");
    assert_true(rp_chat_has_tool_call(RP_CHAT_CHATML, reply));
    rp_tool_call *calls = NULL;
    size_t n = 0;
    char *content = NULL;
    assert_int_equal(rp_chat_parse_tool_calls(RP_CHAT_CHATML, reply, &calls, &n, &content), RP_OK);
    assert_int_equal(n, 1);
    assert_string_equal(calls[0].name, call.name);
    assert_string_equal(calls[0].arguments, call.arguments);
    assert_call_id(calls[0].id);
    assert_string_equal(content, "<think>\n\n</think>\n\nChecking.");
    rp_tool_calls_free(calls, n);
    free(content);
    free(reply);
}

static void test_parse_round_trip_llama3(void **state) {
    (void)state;
    const rp_tool_call call = {.name = "get_weather", .arguments = "{\"city\":\"Paris\",\"n\":3}"};
    char *reply = rendered_reply(RP_CHAT_LLAMA3, &call, NULL,
                                 "<|start_header_id|>assistant<|end_header_id|>\n\n", "<|eot_id|>");
    assert_string_equal(reply,
                        "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"n\": 3}}");
    assert_true(rp_chat_has_tool_call(RP_CHAT_LLAMA3, reply));
    rp_tool_call *calls = NULL;
    size_t n = 0;
    char *content = NULL;
    assert_int_equal(rp_chat_parse_tool_calls(RP_CHAT_LLAMA3, reply, &calls, &n, &content), RP_OK);
    assert_int_equal(n, 1);
    assert_string_equal(calls[0].name, call.name);
    assert_string_equal(calls[0].arguments, call.arguments);
    assert_call_id(calls[0].id);
    assert_string_equal(content, "");
    rp_tool_calls_free(calls, n);
    free(content);
    free(reply);
}

static void test_parse_multiple_chatml(void **state) {
    (void)state;
    const char *text =
        "<think>\nMaybe <tool_call>{\"name\": \"ignored\", \"arguments\": {}}</tool_call> here.\n"
        "</think>\n\nI'll check both.\n"
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
        "<tool_call>\n{\"name\": \"get_time\", \"arguments\": \"{\\\"tz\\\": \\\"CET\\\"}\"}\n</tool_call>\n"
        "<tool_call>\n{\"name\": \"no_args\"}\n</tool_call>";
    rp_tool_call *calls = NULL;
    size_t n = 0;
    char *content = NULL;
    assert_int_equal(rp_chat_parse_tool_calls(RP_CHAT_CHATML, text, &calls, &n, &content), RP_OK);
    assert_int_equal(n, 3);
    assert_string_equal(calls[0].name, "get_weather");
    assert_string_equal(calls[0].arguments, "{\"city\":\"Paris\"}");
    assert_string_equal(calls[1].name, "get_time");
    assert_string_equal(calls[1].arguments, "{\"tz\":\"CET\"}"); /* string-encoded arguments */
    assert_string_equal(calls[2].name, "no_args");
    assert_string_equal(calls[2].arguments, "{}");
    assert_string_not_equal(calls[0].id, calls[1].id);
    /* The reasoning (with the call it mentions) stays in content. */
    assert_string_equal(content,
                        "<think>\nMaybe <tool_call>{\"name\": \"ignored\", \"arguments\": {}}"
                        "</tool_call> here.\n</think>\n\nI'll check both.");
    rp_tool_calls_free(calls, n);
    free(content);
}

static void test_parse_multiple_llama3(void **state) {
    (void)state;
    const char *text = "<|python_tag|>{\"name\": \"a\", \"parameters\": {\"x\": 1}}; "
                       "{\"name\": \"b\", \"arguments\": {\"y\": [true, null]}}";
    rp_tool_call *calls = NULL;
    size_t n = 0;
    char *content = NULL;
    assert_int_equal(rp_chat_parse_tool_calls(RP_CHAT_LLAMA3, text, &calls, &n, &content), RP_OK);
    assert_int_equal(n, 2);
    assert_string_equal(calls[0].name, "a");
    assert_string_equal(calls[0].arguments, "{\"x\":1}");
    assert_string_equal(calls[1].name, "b");
    assert_string_equal(calls[1].arguments, "{\"y\":[true,null]}");
    assert_string_equal(content, "");
    rp_tool_calls_free(calls, n);
    free(content);

    /* A reply that is a JSON array of calls. */
    text = " [{\"name\": \"a\", \"parameters\": {}}, {\"name\": \"b\", \"parameters\": {\"z\": 0.5}}]\n";
    assert_int_equal(rp_chat_parse_tool_calls(RP_CHAT_LLAMA3, text, &calls, &n, &content), RP_OK);
    assert_int_equal(n, 2);
    assert_string_equal(calls[1].name, "b");
    assert_string_equal(calls[1].arguments, "{\"z\":0.5}");
    assert_string_equal(content, "");
    rp_tool_calls_free(calls, n);
    free(content);

    /* Text before the call stays; an object that is not a call is skipped
     * whole (the call-shaped object nested in it is not taken). */
    text = "Let me look.\n{\"note\": {\"name\": \"x\", \"parameters\": {}}}\n"
           "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}";
    assert_int_equal(rp_chat_parse_tool_calls(RP_CHAT_LLAMA3, text, &calls, &n, &content), RP_OK);
    assert_int_equal(n, 1);
    assert_string_equal(calls[0].name, "get_weather");
    assert_string_equal(content, "Let me look.\n{\"note\": {\"name\": \"x\", \"parameters\": {}}}");
    rp_tool_calls_free(calls, n);
    free(content);
}

static void test_parse_malformed_left_in_content(void **state) {
    (void)state;
    rp_tool_call *calls = NULL;
    size_t n = 0;
    char *content = NULL;
    const char *q = "Sure.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": }\n</tool_call>\n"
                    "<tool_call>\n{\"name\": \"g\", \"arguments\": {}}\n</tool_call>";
    assert_int_equal(rp_chat_parse_tool_calls(RP_CHAT_CHATML, q, &calls, &n, &content), RP_OK);
    assert_int_equal(n, 1);
    assert_string_equal(calls[0].name, "g");
    assert_string_equal(content,
                        "Sure.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": }\n</tool_call>");
    rp_tool_calls_free(calls, n);
    free(content);

    const char *l = "<|python_tag|>{\"name\": \"f\", \"parameters\": {\"a\": 1}";
    assert_int_equal(rp_chat_parse_tool_calls(RP_CHAT_LLAMA3, l, &calls, &n, &content), RP_OK);
    assert_int_equal(n, 0);
    assert_null(calls);
    assert_string_equal(content, l);
    free(content);

    /* Valid JSON without a name is not a call either. */
    const char *nn = "<tool_call>{\"arguments\": {}}</tool_call>";
    assert_int_equal(rp_chat_parse_tool_calls(RP_CHAT_CHATML, nn, &calls, &n, &content), RP_OK);
    assert_int_equal(n, 0);
    assert_string_equal(content, nn);
    free(content);
}

static void test_parse_plain_text(void **state) {
    (void)state;
    rp_tool_call *calls = NULL;
    size_t n = 7;
    char *content = NULL;
    const char *t = "  Just an answer.\n";
    for (int f = RP_CHAT_UNKNOWN; f <= RP_CHAT_LLAMA2; f++) {
        assert_int_equal(rp_chat_parse_tool_calls((rp_chat_format)f, t, &calls, &n, &content),
                         RP_OK);
        assert_int_equal(n, 0);
        assert_null(calls);
        assert_string_equal(content, t);
        free(content);
    }
    assert_int_equal(rp_chat_parse_tool_calls(RP_CHAT_CHATML, "", &calls, &n, &content), RP_OK);
    assert_string_equal(content, "");
    free(content);
    assert_int_equal(rp_chat_parse_tool_calls(RP_CHAT_CHATML, NULL, &calls, &n, &content),
                     RP_ERR_INVALID_ARG);
    assert_int_equal(rp_chat_parse_tool_calls(RP_CHAT_CHATML, t, NULL, &n, &content),
                     RP_ERR_INVALID_ARG);
    rp_tool_calls_free(NULL, 0);
}

static void test_has_tool_call(void **state) {
    (void)state;
    assert_false(rp_chat_has_tool_call(RP_CHAT_CHATML, NULL));
    assert_false(rp_chat_has_tool_call(RP_CHAT_CHATML, "Hello"));
    assert_true(rp_chat_has_tool_call(RP_CHAT_CHATML, "ok\n<tool_call>\n{\"na"));
    /* Still reasoning: a mention inside <think> does not count. */
    assert_false(rp_chat_has_tool_call(RP_CHAT_CHATML, "<think>\nuse <tool_call>"));
    assert_true(rp_chat_has_tool_call(RP_CHAT_CHATML, "<think>\nhm\n</think>\n\n<tool_call>"));
    assert_false(rp_chat_has_tool_call(RP_CHAT_LLAMA3, "Paris is sunny."));
    assert_true(rp_chat_has_tool_call(RP_CHAT_LLAMA3, "<|python_tag|>"));
    assert_true(rp_chat_has_tool_call(RP_CHAT_LLAMA3, "{ \"name\": \"get_"));
    assert_false(rp_chat_has_tool_call(RP_CHAT_LLAMA3, "<tool_call>"));
    assert_false(rp_chat_has_tool_call(RP_CHAT_LLAMA2, "<tool_call>{\"name\""));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_detect_real_templates),
        cmocka_unit_test(test_detect_markers),
        cmocka_unit_test(test_llama3_system_user),
        cmocka_unit_test(test_chatml_system_user),
        cmocka_unit_test(test_llama3_multi_turn),
        cmocka_unit_test(test_chatml_multi_turn_reasoning),
        cmocka_unit_test(test_chatml_thinking_disabled),
        cmocka_unit_test(test_llama2),
        cmocka_unit_test(test_llama3_tools_user),
        cmocka_unit_test(test_chatml_tools_user),
        cmocka_unit_test(test_llama3_call_and_result),
        cmocka_unit_test(test_chatml_calls_and_results),
        cmocka_unit_test(test_chatml_agent_loop_no_thinking),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_null_content),
        cmocka_unit_test(test_tojson_matches_python),
        cmocka_unit_test(test_parse_round_trip_chatml),
        cmocka_unit_test(test_parse_round_trip_llama3),
        cmocka_unit_test(test_parse_multiple_chatml),
        cmocka_unit_test(test_parse_multiple_llama3),
        cmocka_unit_test(test_parse_malformed_left_in_content),
        cmocka_unit_test(test_parse_plain_text),
        cmocka_unit_test(test_has_tool_call),
    };
    return rp_test_main(tests, NULL, NULL);
}
