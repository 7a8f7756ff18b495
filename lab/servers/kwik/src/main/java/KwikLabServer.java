// The lab's kwik server: HTTP/3 (flupke) on ip:port, ALPN h3 (or the list given),
// every request answered with 200 and a short body. Flow control from the command line,
// transport parameters by their RFC 9000 names, and what an application chooses:
//   java -jar lab-server.jar --host=IP --port=443 --certificate=C --private-key=K
//        [--max_idle_timeout=MS --initial_max_data=N --initial_max_stream_data_bidi_local=N
//         --initial_max_stream_data_bidi_remote=N --initial_max_streams_bidi=N --initial_max_streams_uni=N]
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
import java.util.HashMap;
import java.util.Map;

import tech.kwik.core.log.SysOutLogger;
import tech.kwik.core.server.ServerConnectionConfig;
import tech.kwik.core.server.ServerConnector;
import tech.kwik.flupke.server.Http3ApplicationProtocolFactory;

public final class KwikLabServer {
    public static void main(String[] args) throws Exception {
        Map<String, String> opt = new HashMap<>();
        for (String arg : args) {
            String[] kv = arg.replaceFirst("^--", "").split("=", 2);
            opt.put(kv[0], kv.length > 1 ? kv[1] : "");
        }
        ServerConnectionConfig.Builder config = ServerConnectionConfig.builder();
        if (opt.containsKey("max_idle_timeout")) config.maxIdleTimeout(Integer.parseInt(opt.get("max_idle_timeout")));
        if (opt.containsKey("initial_max_data")) config.maxConnectionBufferSize(Long.parseLong(opt.get("initial_max_data")));
        long bidi = Math.max(Long.parseLong(opt.getOrDefault("initial_max_stream_data_bidi_local", "0")),
                             Long.parseLong(opt.getOrDefault("initial_max_stream_data_bidi_remote", "0")));
        if (bidi > 0) config.maxBidirectionalStreamBufferSize(bidi);
        if (opt.containsKey("initial_max_streams_bidi")) config.maxOpenPeerInitiatedBidirectionalStreams(Integer.parseInt(opt.get("initial_max_streams_bidi")));
        if (opt.containsKey("initial_max_streams_uni")) config.maxOpenPeerInitiatedUnidirectionalStreams(Integer.parseInt(opt.get("initial_max_streams_uni")));
        if (opt.containsKey("cid-length")) config.connectionIdLength(Integer.parseInt(opt.get("cid-length")));
        config.retryRequired(opt.containsKey("retry"));

        Certificate certificate = CertificateFactory.getInstance("X.509")
                .generateCertificate(Files.newInputStream(Path.of(opt.get("certificate"))));
        String pem = Files.readString(Path.of(opt.get("private-key"))).replaceAll("-----[A-Z ]+-----|\\s", "");
        KeyStore keys = KeyStore.getInstance(KeyStore.getDefaultType());
        keys.load(null, null);
        keys.setKeyEntry("lab", KeyFactory.getInstance("EC").generatePrivate(new PKCS8EncodedKeySpec(Base64.getDecoder().decode(pem))),
                new char[0], new Certificate[] {certificate});

        SysOutLogger log = new SysOutLogger();
        log.logWarning(true);
        DatagramSocket socket = new DatagramSocket(new InetSocketAddress(opt.get("host"), Integer.parseInt(opt.get("port"))));
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
        for (String protocol : opt.getOrDefault("alpn", "h3").split(",")) {
            connector.registerApplicationProtocol(protocol, http3);
        }
        Runtime.getRuntime().addShutdownHook(new Thread(connector::close));
        connector.start();
        System.out.println("listening on " + opt.get("host") + ":" + opt.get("port"));
    }
}
