// The lab's kwik server: HTTP/3 (flupke) on ip:port, ALPN h3 (or the list given),
// every request answered with 200 and a short body. Flow control from the lab-server
// command line (LabArgs), transport parameters by their RFC 9000 names with dashes,
// and what an application chooses:
//   java -jar lab-server.jar IP:443 --cert=C --key=K
//        [--max-idle-timeout=MS --initial-max-data=N --initial-max-stream-data-bidi-local=N
//         --initial-max-stream-data-bidi-remote=N --initial-max-streams-bidi=N --initial-max-streams-uni=N]
//        [--alpn=h3,... --cid-length=N --retry]
// kwik has one window for both bidi directions: the larger is used. No uni
// window: flupke pins it to 1024.
// kwik's PEM loader takes RSA keys only; its KeyStore path takes the lab's EC P-256 key.

import java.io.OutputStream;
import java.net.DatagramSocket;
import java.net.InetSocketAddress;
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

import tech.kwik.core.log.SysOutLogger;
import tech.kwik.core.server.ServerConnectionConfig;
import tech.kwik.core.server.ServerConnector;
import tech.kwik.flupke.server.Http3ApplicationProtocolFactory;

public final class KwikLabServer {
    public static void main(String[] args) throws Exception {
        LabArgs opt = LabArgs.parse("kwik", args, Set.of("max-idle-timeout", "initial-max-data",
                "initial-max-stream-data-bidi-local", "initial-max-stream-data-bidi-remote", "initial-max-streams-bidi",
                "initial-max-streams-uni", "alpn", "cid-length", "retry"));
        ServerConnectionConfig.Builder config = ServerConnectionConfig.builder();
        if (opt.has("max-idle-timeout")) config.maxIdleTimeout((int) opt.number("max-idle-timeout"));
        if (opt.has("initial-max-data")) config.maxConnectionBufferSize(opt.number("initial-max-data"));
        long bidi = 0;
        for (String window : new String[] {"initial-max-stream-data-bidi-local", "initial-max-stream-data-bidi-remote"}) {
            if (opt.has(window)) bidi = Math.max(bidi, opt.number(window));
        }
        if (bidi > 0) config.maxBidirectionalStreamBufferSize(bidi);
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

        SysOutLogger log = new SysOutLogger();
        log.logWarning(true);
        DatagramSocket socket = new DatagramSocket(new InetSocketAddress(opt.host, opt.port));
        ServerConnector connector = ServerConnector.builder()
                .withSocket(socket)
                .withKeyStore(keys, "lab", new char[0], "secp256r1")
                .withConfiguration(config.build())
                .withLogger(log)
                .build();
        byte[] body = "kwik lab server\n".getBytes(StandardCharsets.UTF_8);
        Http3ApplicationProtocolFactory http3 = new Http3ApplicationProtocolFactory((request, response) -> {
            response.setStatus(200);
            try (OutputStream out = response.getOutputStream()) {
                out.write(body);
            }
        });
        // Every protocol accepted is served as HTTP/3: the lab only needs the handshake to take it.
        for (String protocol : opt.get("alpn", "h3").split(",")) {
            connector.registerApplicationProtocol(protocol, http3);
        }
        Runtime.getRuntime().addShutdownHook(new Thread(connector::close));
        connector.start();
        System.out.println("listening on " + opt.host + ":" + opt.port);
    }
}
