/* test_toolcall_check.c — rp_tool_call_check: a parsed call against the tool definitions (unknown tool, arguments
 * not an object, required keys, types, enum, nested properties and items). */
#include <stdlib.h>
#include <string.h>

#include "reprise.h"
#include "testutil.h"

static const char k_tools[] =
        "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","
        "\"properties\":{\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"},"
        "\"unit\":{\"type\":\"string\",\"enum\":[\"c\",\"f\"]},"
        "\"at\":{\"type\":\"object\",\"properties\":{\"lat\":{\"type\":\"number\"}},\"required\":[\"lat\"]},"
        "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}},"
        "\"note\":{\"type\":[\"string\",\"null\"]}},\"required\":[\"city\"]}}},"
        "{\"name\":\"ping\"}]";

static rp_status check(const char *name, const char *args, char *why) {
    rp_tool_call c = {.name = (char *)name, .arguments = (char *)args};
    return rp_tool_call_check(k_tools, &c, why, 160);
}

static void test_valid(void **state) {
    (void)state;
    char why[160];
    assert_int_equal(check("get_weather", "{\"city\":\"Paris\"}", why), RP_OK);
    assert_string_equal(why, "");
    assert_int_equal(check("get_weather", "{\"city\":\"Paris\",\"days\":3,\"unit\":\"c\",\"at\":{\"lat\":48.8},"
                                          "\"tags\":[\"a\",\"b\"],\"note\":null,\"extra\":1}", why), RP_OK);
    assert_int_equal(check("get_weather", "{\"city\":\"Paris\",\"days\":3.0}", why), RP_OK);   /* 3.0 is an integer */
    assert_int_equal(check("ping", "{}", why), RP_OK);   /* a bare function definition, no parameters */
    rp_tool_call c = {.name = "anything", .arguments = "{\"x\":1}"};
    assert_int_equal(rp_tool_call_check(NULL, &c, why, sizeof why), RP_OK);   /* no tools: object only */
}

static void test_invalid(void **state) {
    (void)state;
    char why[160];
    static const struct { const char *name, *args, *why; } bad[] = {
            {"get_time", "{}", "no tool is named \"get_time\""},
            {"get_weather", "[1]", "the arguments of get_weather are not a JSON object"},
            {"get_weather", "{\"city\":", "the arguments of get_weather are not a JSON object"},
            {"get_weather", "{}", "arguments lacks the required key \"city\""},
            {"get_weather", "{\"city\":7}", "arguments.city is not of type string"},
            {"get_weather", "{\"city\":\"P\",\"days\":2.5}", "arguments.days is not of type integer"},
            {"get_weather", "{\"city\":\"P\",\"unit\":\"k\"}", "arguments.unit is not one of the enum values"},
            {"get_weather", "{\"city\":\"P\",\"at\":{}}", "arguments.at lacks the required key \"lat\""},
            {"get_weather", "{\"city\":\"P\",\"at\":{\"lat\":\"n\"}}", "arguments.at.lat is not of type number"},
            {"get_weather", "{\"city\":\"P\",\"tags\":[\"a\",1]}", "arguments.tags[1] is not of type string"},
            {"get_weather", "{\"city\":\"P\",\"note\":3}", "arguments.note is not of any of the types allowed"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(check(bad[i].name, bad[i].args, why), RP_ERR_INVALID_ARG);
        assert_string_equal(why, bad[i].why);
    }
    rp_tool_call c = {.name = "ping", .arguments = "{}"};
    assert_int_equal(rp_tool_call_check("{\"not\":\"an array\"}", &c, why, sizeof why), RP_ERR_INVALID_ARG);
    assert_int_equal(rp_tool_call_check(k_tools, NULL, why, sizeof why), RP_ERR_INVALID_ARG);
}

int main(void) {
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_valid),
            cmocka_unit_test(test_invalid),
    };
    return rp_test_main(tests, NULL, NULL);
}
