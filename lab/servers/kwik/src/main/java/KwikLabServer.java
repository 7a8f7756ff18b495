// The lab's kwik server, and qreplay's kwik h3 server for the browsers (replay/stacks/kwik.py): HTTP/3
// (flupke) on ip:port, ALPN h3 (or the list given), answering as every qreplay h3 server does
// (lab/servers/common/src/page.rs): GET /<size> with that many bytes, a PUT or POST with the count of body
// bytes read (decimal, once the body has ended), GET /<file> with that file of the directory QREPLAY_HTDOCS
// names (/ is index.html), anything else 404. Flow control from the lab-server
// command line (LabArgs), transport parameters by their RFC 9000 names with dashes,
// and what an application chooses:
//   java -jar lab-server.jar IP:443 --cert=C --key=K
//        [--max-idle-timeout=MS --initial-max-data=N --initial-max-stream-data-bidi-local=N
//         --initial-max-stream-data-bidi-remote=N --initial-max-streams-bidi=N --initial-max-streams-uni=N]
//        [--alpn=h3,... --cid-length=N --retry]
// kwik has one window for both bidi directions: the larger is used. No uni
// window: flupke pins it to 1024.
// kwik's PEM loader takes RSA keys only; its KeyStore path takes the lab's EC P-256 key.
// With QREPLAY_WARM_UP set (qreplay's kwik stack sets it), the JVM runs a few handshakes with itself on
// host:ephemeral before the socket is bound (warmUp).

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.DatagramSocket;
import java.net.InetSocketAddress;
import java.net.URI;
import java.time.Duration;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.KeyFactory;
import java.security.KeyStore;
import java.security.cert.Certificate;
import java.security.cert.CertificateFactory;
import java.security.spec.PKCS8EncodedKeySpec;
import java.util.Base64;
import java.util.Set;
import java.util.regex.Pattern;

import tech.kwik.core.QuicClientConnection;
import tech.kwik.core.log.Logger;
import tech.kwik.core.log.NullLogger;
import tech.kwik.core.log.SysOutLogger;
import tech.kwik.core.server.ServerConnectionConfig;
import tech.kwik.core.server.ServerConnector;
import tech.kwik.flupke.server.Http3ApplicationProtocolFactory;
import tech.kwik.flupke.server.HttpServerRequest;
import tech.kwik.flupke.server.HttpServerResponse;

public final class KwikLabServer {
    public static void main(String[] args) throws Exception {
        LabArgs opt = LabArgs.parse("kwik", args, Set.of("max-idle-timeout", "initial-max-data",
                "initial-max-stream-data-bidi-local", "initial-max-stream-data-bidi-remote", "initial-max-streams-bidi",
                "initial-max-streams-uni", "alpn", "cid-length", "retry"));
        ServerConnectionConfig.Builder config = ServerConnectionConfig.builder();
        if (opt.has("max-idle-timeout")) config.maxIdleTimeout((int) opt.number("max-idle-timeout"));
        long bidi = 0;
        for (String window : new String[] {"initial-max-stream-data-bidi-local", "initial-max-stream-data-bidi-remote"}) {
            if (opt.has(window)) bidi = Math.max(bidi, opt.number(window));
        }
        if (bidi > 0) config.maxBidirectionalStreamBufferSize(bidi);
        // kwik refuses to start with a connection window below a stream window (its default is 0): the stream
        // window raises it, as merging flupke's settings would (lab/kinds/kwik.py predicts that value).
        long data = opt.has("initial-max-data") ? opt.number("initial-max-data") : 0;
        if (data > 0 || bidi > 0) config.maxConnectionBufferSize(Math.max(data, bidi));
        if (opt.has("initial-max-streams-bidi")) config.maxOpenPeerInitiatedBidirectionalStreams((int) opt.number("initial-max-streams-bidi"));
        if (opt.has("initial-max-streams-uni")) config.maxOpenPeerInitiatedUnidirectionalStreams((int) opt.number("initial-max-streams-uni"));
        if (opt.has("cid-length")) config.connectionIdLength((int) opt.number("cid-length"));
        config.retryRequired(opt.has("retry"));

        Certificate certificate = CertificateFactory.getInstance("X.509")
                .generateCertificate(Files.newInputStream(Path.of(opt.get("cert", null))));
        String pem = Files.readString(Path.of(opt.get("key", null))).replaceAll("-----[A-Z ]+-----|\\s", "");
        KeyStore keys = KeyStore.getInstance(KeyStore.getDefaultType());
        keys.load(null, null);
        keys.setKeyEntry("lab", KeyFactory.getInstance("EC").generatePrivate(new PKCS8EncodedKeySpec(Base64.getDecoder().decode(pem))),
                new char[0], new Certificate[] {certificate});

        if (System.getenv("QREPLAY_WARM_UP") != null) warmUp(opt.host, config.build(), keys);

        SysOutLogger log = new SysOutLogger();
        log.logWarning(true);
        // Every protocol accepted is served as HTTP/3: the lab only needs the handshake to take it.
        ServerConnector connector = connector(new DatagramSocket(new InetSocketAddress(opt.host, opt.port)),
                config.build(), keys, log, opt.get("alpn", "h3").split(","));
        Runtime.getRuntime().addShutdownHook(new Thread(connector::close));
        connector.start();
        System.out.println("listening on " + opt.host + ":" + opt.port);
    }

    /** The server on ``socket``, answering by the replay contract (answer) over HTTP/3 for each of ``protocols``;
     *  not started. */
    static ServerConnector connector(DatagramSocket socket, ServerConnectionConfig config, KeyStore keys, Logger log,
                                     String[] protocols) throws Exception {
        ServerConnector connector = ServerConnector.builder()
                .withSocket(socket)
                .withKeyStore(keys, "lab", new char[0], "secp256r1")
                .withConfiguration(config)
                .withLogger(log)
                .build();
        Http3ApplicationProtocolFactory http3 = new Http3ApplicationProtocolFactory(KwikLabServer::answer);
        http3.setMaxDataSize(Long.MAX_VALUE);  // flupke refuses a request body past 10 MiB by default
        for (String protocol : protocols) {
            connector.registerApplicationProtocol(protocol, http3);
        }
        return connector;
    }

    /** A fresh JVM runs kwik's handshake in its interpreter: it answered Chromium's first Initial 0.6 s late, the
     *  handshake took 0.2-1.1 s, and Chromium's smoothed RTT starts from that sample, so its pacer sent an upload's
     *  first round trips at a few Mbit/s (2026-11-29). So before the real socket is bound (qreplay waits for it),
     *  the same server takes WARM_UP_ROUNDS handshakes from kwik's client on host:ephemeral, for at most
     *  WARM_UP_BUDGET_NS (qreplay gives a server 10 s to listen); what fails is reported and the server starts
     *  anyway. Handshakes only: a warm-up that also loaded pages, a download and an upload through flupke's client
     *  left 4 of 8 pages of 20 objects unfinished at their timeout against 1 of 8 unwarmed (2026-11-29, load 6-12). */
    static void warmUp(String host, ServerConnectionConfig config, KeyStore keys) {
        long started = System.nanoTime();
        int[] done = {0};
        try {
            DatagramSocket socket = new DatagramSocket(new InetSocketAddress(host, 0));
            ServerConnector connector = connector(socket, config, keys, new NullLogger(), new String[] {"h3"});
            connector.start();
            String base = "https://" + (host.contains(":") ? "[" + host + "]" : host) + ":" + socket.getLocalPort() + "/";
            Thread client = new Thread(() -> {
                try {
                    for (int round = 0; round < WARM_UP_ROUNDS; round++) {
                        QuicClientConnection connection = QuicClientConnection.newBuilder().uri(URI.create(base))
                                .applicationProtocol("h3").noServerCertificateCheck().connectTimeout(Duration.ofSeconds(2))
                                .build();
                        connection.connect();
                        connection.closeAndWait(Duration.ofSeconds(1));
                        done[0]++;
                    }
                } catch (Exception e) {
                    System.err.println("kwik warm-up stopped: " + e);
                }
            });
            client.setDaemon(true);
            client.start();
            client.join(WARM_UP_BUDGET_NS / 1_000_000);
            // kwik's close waits for its connections to close: a handshake cut off by the budget would hold the real
            // socket back (one server did not listen within qreplay's 10 s at load 8), so it closes beside the start
            Thread closer = new Thread(connector::close);
            closer.setDaemon(true);
            closer.start();
        } catch (Exception e) {
            System.err.println("kwik warm-up stopped: " + e);
        }
        System.err.printf("kwik warm-up: %d rounds in %.2f s%n", done[0], (System.nanoTime() - started) / 1e9);
    }

    private static final int WARM_UP_ROUNDS = 5;
    private static final long WARM_UP_BUDGET_NS = 2_000_000_000L;

    private static final Pattern SIZE = Pattern.compile("[0-9]{1,18}");
    private static final Pattern FILE = Pattern.compile("[A-Za-z0-9_][A-Za-z0-9_.-]*");
    private static final byte[] CHUNK = new byte[64 * 1024];

    /** One request, answered as lab/servers/common/src/page.rs says (flupke runs each on a thread of its own). */
    static void answer(HttpServerRequest request, HttpServerResponse response) throws IOException {
        String path = request.path().split("\\?", 2)[0];
        String method = request.method();
        if (method.equals("PUT") || method.equals("POST")) {
            long count = 0;
            try (InputStream in = request.body()) {
                byte[] buffer = new byte[64 * 1024];
                for (int read; (read = in.read(buffer)) >= 0; ) count += read;
            }
            respond(response, 200, "text/plain", Long.toString(count).getBytes(StandardCharsets.US_ASCII));
            return;
        }
        String name = path.equals("/") ? "index.html" : path.substring(1);
        if (method.equals("GET") && SIZE.matcher(name).matches()) {
            long left = Long.parseLong(name);
            response.setStatus(200);
            response.addHeader("content-length", Long.toString(left));
            try (OutputStream out = response.getOutputStream()) {
                for (int piece; left > 0; left -= piece) {
                    piece = (int) Math.min(CHUNK.length, left);
                    out.write(CHUNK, 0, piece);
                }
            }
            return;
        }
        String htdocs = System.getenv("QREPLAY_HTDOCS");
        if (method.equals("GET") && htdocs != null && FILE.matcher(name).matches() && Files.isRegularFile(Path.of(htdocs, name))) {
            respond(response, 200, "text/html; charset=utf-8", Files.readAllBytes(Path.of(htdocs, name)));
            return;
        }
        respond(response, 404, null, new byte[0]);
    }

    private static void respond(HttpServerResponse response, int status, String type, byte[] body) throws IOException {
        response.setStatus(status);
        if (type != null) response.addHeader("content-type", type);
        response.addHeader("content-length", Integer.toString(body.length));
        try (OutputStream out = response.getOutputStream()) {
            out.write(body);
        }
    }
}
