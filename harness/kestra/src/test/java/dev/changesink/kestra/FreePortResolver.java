package dev.changesink.kestra;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Optional;
import java.util.concurrent.ThreadLocalRandom;

import io.micronaut.context.env.PropertyExpressionResolver;
import io.micronaut.core.convert.ConversionService;
import io.micronaut.core.value.PropertyResolver;

/**
 * {@code ${changesink.free-port}} in application.yml: a TCP port free now and outside the kernel's ephemeral range
 * ({@code /proc/sys/net/ipv4/ip_local_port_range}), for the worker controller Kestra 2.0 starts in each test
 * context. Micronaut's {@code ${random.port}} may give a port in that range, and between its check and the
 * controller's bind, seconds later under load, an outbound connection of any process on the machine can take it
 * as its local port: the bind then fails and the worker waits 30 s for a controller that is not there ("Connection
 * refused"). That is the suspected cause of one CdcFlowTest start-up failure when two CI runs shared the machine
 * (its log kept no bind error; the controller now logs its port at INFO, see logback-test.xml). The kernel never gives a port
 * outside the range to a connection, so only a listener bound to the same number in the same seconds can collide.
 * Micronaut resolves a property's placeholder once, so the controller and the worker's endpoint
 * ({@code ${kestra.controller.port}}) get the same port. Found through
 * META-INF/services/io.micronaut.context.env.PropertyExpressionResolver.
 */
public final class FreePortResolver implements PropertyExpressionResolver {
    static final String EXPRESSION = "changesink.free-port";
    /** Below this are the well-known ports and the test services' (.ci/services: 18123, 19000, 19092–19099, 19440). */
    static final int FLOOR = 20000;
    static final int CEILING = 65535;
    private static final Path EPHEMERAL = Path.of("/proc/sys/net/ipv4/ip_local_port_range");

    @Override
    public <T> Optional<T> resolve(PropertyResolver propertyResolver, ConversionService conversionService, String expression, Class<T> requiredType) {
        if (!EXPRESSION.equals(expression)) {
            return Optional.empty();
        }
        return Optional.of(conversionService.convertRequired(freePort(ephemeralRange()), requiredType));
    }

    /** The kernel's ephemeral range, or Linux's default when it cannot be read. */
    static int[] ephemeralRange() {
        try {
            String[] f = Files.readString(EPHEMERAL).trim().split("\\s+");
            return new int[] {Integer.parseInt(f[0]), Integer.parseInt(f[1])};
        } catch (IOException | RuntimeException e) {
            return new int[] {32768, 60999};
        }
    }

    /** A port in [FLOOR, CEILING] outside {@code ephemeral} that a listener can bind now. */
    static int freePort(int[] ephemeral) {
        int below = Math.max(0, Math.min(ephemeral[0], CEILING + 1) - FLOOR);
        int above = Math.max(0, CEILING - Math.max(ephemeral[1], FLOOR - 1));
        if (below + above == 0) {
            throw new IllegalStateException("no port in " + FLOOR + "-" + CEILING + " is outside the ephemeral range "
                + ephemeral[0] + "-" + ephemeral[1] + " (" + EPHEMERAL + ")");
        }
        for (int attempt = 0; attempt < 200; attempt++) {
            int i = ThreadLocalRandom.current().nextInt(below + above);
            int port = i < below ? FLOOR + i : Math.max(ephemeral[1], FLOOR - 1) + 1 + (i - below);
            if (bindable(port)) {
                return port;
            }
        }
        throw new IllegalStateException("200 ports outside the ephemeral range were all in use");
    }

    private static boolean bindable(int port) {
        // As the controller's gRPC server binds: every address, with SO_REUSEADDR (a TIME_WAIT does not stop it).
        try (ServerSocket s = new ServerSocket()) {
            s.setReuseAddress(true);
            s.bind(new InetSocketAddress(port));
            return true;
        } catch (IOException e) {
            return false;
        }
    }
}
