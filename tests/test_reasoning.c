/* test_reasoning.c — splitting <think>...</think> out of replies (rp_chat_split_reasoning, rp_chat_reasoning_span),
 * whole and streamed at every byte offset, and template variables (rp_chat_render_vars) on Qwen3's template. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reprise.h"
#include "testutil.h"

typedef struct {
    const char *text;
    bool started;
    const char *reasoning;   /* NULL: no think block */
    const char *content;
} split_case;

static const split_case k_cases[] = {
    {"<think>\nLet me add: 2+2=4.\n</think>\n\nThe answer is 4.", false, "Let me add: 2+2=4.", "The answer is 4."},
    {"  <think>a</think>b", false, "a", "b"},
    {"No thinking here.", false, NULL, "No thinking here."},
    {"<think>\n\n</think>\n\nEmpty thought.", false, "", "Empty thought."},
    /* DeepSeek-R1 distills: the generation prompt opened the block */
    {"I reason.\n</think>\n\nDone.", true, "I reason.", "Done."},
    /* cut off while thinking: all of it is reasoning */
    {"<think>still going", false, "still going", ""},
    {"half a tag </thi", true, "half a tag </thi", ""},
    /* a reply that only looks like the start of a tag is content */
    {"<thin", false, NULL, "<thin"},
    {"<b>bold</b> not thinking", false, NULL, "<b>bold</b> not thinking"},
    /* content may mention tags after the block */
    {"<think>x</think>use <think> tags", false, "x", "use <think> tags"},
    {"<think>a</think><tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>", false, "a",
     "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>"},
};

static void test_split_whole(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof k_cases / sizeof k_cases[0]; i++) {
        const split_case *c = &k_cases[i];
        char *r = NULL, *t = NULL;
        assert_int_equal(rp_chat_split_reasoning(c->text, c->started, &r, &t), RP_OK);
        if (c->reasoning) {
            assert_non_null(r);
            assert_string_equal(r, c->reasoning);
        } else
            assert_null(r);
        assert_string_equal(t, c->content);
        free(r);
        free(t);
    }
}

/* Streaming: the text grows one byte at a time (every split point); the streamed reasoning and content, each the
 * concatenation of what its span gained, must end equal to the whole-reply spans, and no span may shrink. */
static void test_split_streamed_every_offset(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof k_cases / sizeof k_cases[0]; i++) {
        const split_case *c = &k_cases[i];
        const size_t n = strlen(c->text);
        for (size_t cut = 0; cut <= n; cut++) {   /* two chunks: [0,cut) then the rest, byte by byte after */
            size_t r_sent = 0, c_sent = 0, r_begin = 0, c_begin = 0;
            bool r_open = false, c_open = false;
            char rs[256] = "", cs[256] = "";
            for (size_t len = cut; len <= n; len = len < n ? len + 1 : n + 1) {
                rp_reasoning_span s;
                rp_chat_reasoning_span(c->text, len, c->started, len == n, &s);
                if (s.has_reasoning && s.reasoning_end > s.reasoning_begin) {   /* begin is fixed once non-empty */
                    if (!r_open) r_begin = s.reasoning_begin, r_open = true, r_sent = s.reasoning_begin;
                    assert_int_equal(s.reasoning_begin, r_begin);
                    assert_true(s.reasoning_end >= r_sent);
                    strncat(rs, c->text + r_sent, s.reasoning_end - r_sent);
                    r_sent = s.reasoning_end;
                }
                if (s.content_end > s.content_begin) {
                    if (!c_open) c_begin = s.content_begin, c_open = true, c_sent = s.content_begin;
                    assert_int_equal(s.content_begin, c_begin);
                    assert_true(s.content_end >= c_sent);
                    strncat(cs, c->text + c_sent, s.content_end - c_sent);
                    c_sent = s.content_end;
                }
                if (len == n) break;
            }
            /* streamed reasoning keeps the white space before </think> that the whole split trims */
            size_t rl = strlen(rs);
            while (rl > 0 && (rs[rl - 1] == '\n' || rs[rl - 1] == ' ')) rs[--rl] = '\0';
            if (c->reasoning) assert_string_equal(rs, c->reasoning);
            else assert_false(r_open);
            (void)r_begin;
            assert_string_equal(cs, c->content);
        }
    }
}

static void test_held_back_partial_tags(void **state) {
    (void)state;
    rp_reasoning_span s;
    rp_chat_reasoning_span("<thi", 4, false, false, &s);   /* undecided: nothing is streamable */
    assert_false(s.has_reasoning);
    assert_int_equal(s.content_end, s.content_begin);
    rp_chat_reasoning_span("<think>abc</th", 14, false, false, &s);
    assert_true(s.has_reasoning);
    assert_true(s.in_reasoning);
    assert_int_equal(s.reasoning_begin, 7);
    assert_int_equal(s.reasoning_end, 10);   /* "</th" held back */
    assert_true(rp_chat_prompt_opens_thinking("<|im_start|>assistant\n<think>\n", 30));
    assert_false(rp_chat_prompt_opens_thinking("<|im_start|>assistant\n", 22));
}

/* Qwen3 (the built-in renders its template): enable_thinking false adds an empty think block, true and not given
 * (the template's default) none. */
static void test_render_vars_qwen3(void **state) {
    (void)state;
    RP_OPEN_STORIES(m);
    assert_int_equal(rp_chat_template_set(m, "qwen3"), RP_OK);
    const rp_chat_message msgs[] = {{.role = "user", .content = "Hi"}};
    char buf[4096];
    size_t len = 0;
    rp_chat_vars off = {.enable_thinking = 0};
    assert_int_equal(rp_chat_render_vars(m, msgs, 1, NULL, true, &off, buf, sizeof buf, &len), RP_OK);
    assert_non_null(strstr(buf, "<|im_start|>assistant\n<think>\n\n</think>\n\n"));
    assert_false(rp_chat_prompt_opens_thinking(buf, len));
    rp_chat_vars on = {.enable_thinking = 1};
    assert_int_equal(rp_chat_render_vars(m, msgs, 1, NULL, true, &on, buf, sizeof buf, &len), RP_OK);
    assert_null(strstr(buf, "<think>"));
    rp_chat_vars dflt = {.enable_thinking = -1};   /* not given: Qwen3's own default, thinking */
    assert_int_equal(rp_chat_render_vars(m, msgs, 1, NULL, true, &dflt, buf, sizeof buf, &len), RP_OK);
    assert_null(strstr(buf, "<think>"));
    assert_int_equal(rp_chat_render(m, msgs, 1, NULL, true, buf, sizeof buf, &len), RP_OK);
    assert_null(strstr(buf, "<think>"));
    rp_chat_vars bad = {.enable_thinking = 1, .vars_json = "[1]"};
    assert_int_equal(rp_chat_render_vars(m, msgs, 1, NULL, true, &bad, buf, sizeof buf, &len), RP_ERR_INVALID_ARG);
    rp_model_free(m);
}

/* DeepSeek-R1-Distill-Qwen's real template: the generation prompt opens the think block, so the reply is
 * reasoning until </think>. */
static void test_render_deepseek_r1_opens_thinking(void **state) {
    (void)state;
    const char *rel = "models/templates/deepseek-r1-distill-qwen.jinja";
    const char *path = rp_test_shared(rel);
    RP_REQUIRE_SHARED(path, rel);
    RP_OPEN_STORIES(m);
    assert_int_equal(rp_chat_template_set(m, path), RP_OK);
    const rp_chat_message msgs[] = {{.role = "user", .content = "What is 2+2?"}};
    char buf[4096];
    size_t len = 0;
    assert_int_equal(rp_chat_render(m, msgs, 1, NULL, true, buf, sizeof buf, &len), RP_OK);
    assert_true(rp_chat_prompt_opens_thinking(buf, len));
    char *r = NULL, *c = NULL;
    assert_int_equal(rp_chat_split_reasoning("2 plus 2 is 4.\n</think>\n\n**4**", true, &r, &c), RP_OK);
    assert_string_equal(r, "2 plus 2 is 4.");
    assert_string_equal(c, "**4**");
    free(r);
    free(c);
    rp_model_free(m);
}

/* A file template sees reasoning_effort and chat_template_kwargs (which override enable_thinking). */
static void test_render_vars_effort(void **state) {
    (void)state;
    RP_OPEN_STORIES(m);
    char path[512];
    snprintf(path, sizeof path, "%s/effort.jinja", rp_test_tmpdir());
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("{% for m in messages %}{{ m.content }}{% endfor %}[{{ reasoning_effort | default('none') }}]"
          "[{{ custom | default('-') }}][{{ enable_thinking }}]", f);
    fclose(f);
    assert_int_equal(rp_chat_template_set(m, path), RP_OK);
    const rp_chat_message msgs[] = {{.role = "user", .content = "Q"}};
    char buf[256];
    size_t len = 0;
    rp_chat_vars v = {.enable_thinking = -1, .reasoning_effort = "high", .vars_json = "{\"custom\": \"x\", \"enable_thinking\": true}"};
    assert_int_equal(rp_chat_render_vars(m, msgs, 1, NULL, true, &v, buf, sizeof buf, &len), RP_OK);
    assert_string_equal(buf, "Q[high][x][True]");
    assert_int_equal(rp_chat_render(m, msgs, 1, NULL, true, buf, sizeof buf, &len), RP_OK);
    assert_string_equal(buf, "Q[none][-][]");   /* not given: undefined, the template's own default */
    rp_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_split_whole),
            cmocka_unit_test(test_split_streamed_every_offset),
            cmocka_unit_test(test_held_back_partial_tags),
            cmocka_unit_test(test_render_vars_qwen3),
            cmocka_unit_test(test_render_deepseek_r1_opens_thinking),
            cmocka_unit_test(test_render_vars_effort),
    };
    return rp_test_main(tests, NULL, NULL);
}
