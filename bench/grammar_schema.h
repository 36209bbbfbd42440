/* grammar_schema.h — the ordinary extraction schema that `reprise bench grammar` times and test_grammar_fast checks
 * masks on: nested objects, arrays of objects, enums, bounded strings and numbers. */
#ifndef RP_BENCH_GRAMMAR_SCHEMA_H
#define RP_BENCH_GRAMMAR_SCHEMA_H

static const char RP_NESTED_SCHEMA[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"id\":{\"type\":\"integer\"},"
    "\"customer\":{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":24},"
    "\"tier\":{\"enum\":[\"free\",\"pro\",\"enterprise\"]},\"email\":{\"type\":\"string\"}},"
    "\"required\":[\"name\",\"tier\",\"email\"],\"additionalProperties\":false},"
    "\"items\":{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{"
    "\"sku\":{\"type\":\"string\",\"maxLength\":12},\"qty\":{\"type\":\"integer\"},\"price\":{\"type\":\"number\"},"
    "\"status\":{\"enum\":[\"in_stock\",\"backorder\",\"discontinued\"]}},"
    "\"required\":[\"sku\",\"qty\",\"price\",\"status\"],\"additionalProperties\":false},\"maxItems\":4},"
    "\"notes\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"maxItems\":3},"
    "\"paid\":{\"type\":\"boolean\"}},"
    "\"required\":[\"id\",\"customer\",\"items\",\"notes\",\"paid\"],\"additionalProperties\":false}";

#endif /* RP_BENCH_GRAMMAR_SCHEMA_H */
