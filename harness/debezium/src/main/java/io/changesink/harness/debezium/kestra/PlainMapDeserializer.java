package io.changesink.harness.debezium.kestra;

import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.databind.DeserializationContext;
import com.fasterxml.jackson.databind.JsonDeserializer;
import com.fasterxml.jackson.databind.ObjectMapper;

import java.io.IOException;
import java.util.Map;

/**
 * Reads a row image ({@code before}/{@code after}) the way the trigger's {@code CustomParameterDeserializer} does:
 * with a plain {@code new ObjectMapper()}, not Kestra's, either from a JSON string or from the tokens in place.
 * This is where the row's values take their final Java types: what Kestra's JSON mapper wrote into the token
 * buffer (numbers as they are, byte[] as embedded binary, dates and times already as strings) comes back as
 * Map/List/String/Number/Boolean/byte[]; a NULL column is already gone (NON_NULL on the writing side).
 */
public final class PlainMapDeserializer extends JsonDeserializer<Map<String, Object>> {
    private final ObjectMapper mapper = new ObjectMapper();

    @Override
    @SuppressWarnings("unchecked")
    public Map<String, Object> deserialize(JsonParser p, DeserializationContext ctxt) throws IOException {
        if (p.currentToken() == JsonToken.VALUE_STRING) {
            return mapper.readValue(p.getText(), Map.class);
        }
        return mapper.readValue(p, Map.class);
    }
}
