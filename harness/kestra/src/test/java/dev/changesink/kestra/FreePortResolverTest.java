package dev.changesink.kestra;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.util.Optional;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

import io.micronaut.core.convert.ConversionService;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The controller's port: free, and never one the kernel could give an outbound connection. */
class FreePortResolverTest {
    @ParameterizedTest(name = "ephemeral {0}-{1}")
    @CsvSource({"32768,60999", "1024,65000", "21000,65535", "49152,65535", "1024,19999", "30000,30000"})
    void outsideTheEphemeralRange(int low, int high) throws IOException {
        int[] ephemeral = {low, high};
        for (int i = 0; i < 300; i++) {
            int port = FreePortResolver.freePort(ephemeral);
            assertTrue(port >= FreePortResolver.FLOOR && port <= FreePortResolver.CEILING, "port " + port);
            assertTrue(port < low || port > high, "port " + port + " is in the ephemeral range " + low + "-" + high);
        }
        // The port it gives can be listened on.
        try (ServerSocket s = new ServerSocket()) {
            s.setReuseAddress(true);
            s.bind(new InetSocketAddress(FreePortResolver.freePort(ephemeral)));
        }
    }

    @Test
    void noRoomIsAnError() {
        IllegalStateException e = assertThrows(IllegalStateException.class,
            () -> FreePortResolver.freePort(new int[] {FreePortResolver.FLOOR, FreePortResolver.CEILING}));
        assertTrue(e.getMessage().contains("outside the ephemeral range"), e.getMessage());
    }

    @Test
    void thisMachinesRange() {
        int[] r = FreePortResolver.ephemeralRange();
        assertTrue(r[0] > 0 && r[0] <= r[1] && r[1] <= 65535, r[0] + "-" + r[1]);
    }

    @Test
    void onlyItsOwnExpression() {
        FreePortResolver resolver = new FreePortResolver();
        ConversionService conv = ConversionService.SHARED;
        assertEquals(Optional.empty(), resolver.resolve(null, conv, "random.port", Integer.class));
        int port = resolver.resolve(null, conv, FreePortResolver.EXPRESSION, Integer.class).orElseThrow();
        int[] r = FreePortResolver.ephemeralRange();
        assertTrue(port < r[0] || port > r[1], "port " + port);
    }
}
