// The lab's netty server: QUIC (netty-incubator-codec-quic, quiche inside) on
// ip:port with ALPN h3 (or the list given); it completes handshakes and discards what streams
// carry (HTTP/3 itself is not served: no codec-http3 for quic 0.0.20 is on Maven Central).
// netty's only token handler answers every first Initial with a Retry.
// Flow control from the command line, transport parameters by their RFC 9000 names:
//   java -jar lab-server.jar --host=IP --port=443 --certificate=C --private-key=K
//        [--max_idle_timeout=MS --initial_max_data=N --initial_max_stream_data_bidi_local=N
//         --initial_max_stream_data_bidi_remote=N --initial_max_stream_data_uni=N
//         --initial_max_streams_bidi=N --initial_max_streams_uni=N]
//        [--alpn=h3,... --cid-length=N --datagrams=true --disable-active-migration]

import java.io.File;
import java.net.InetSocketAddress;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import io.netty.bootstrap.Bootstrap;
import io.netty.channel.Channel;
import io.netty.channel.ChannelHandler;
import io.netty.channel.ChannelHandlerContext;
import io.netty.channel.ChannelInboundHandlerAdapter;
import io.netty.channel.nio.NioEventLoopGroup;
import io.netty.channel.socket.nio.NioDatagramChannel;
import io.netty.incubator.codec.quic.InsecureQuicTokenHandler;
import io.netty.incubator.codec.quic.QuicServerCodecBuilder;
import io.netty.incubator.codec.quic.QuicSslContextBuilder;
import io.netty.util.ReferenceCountUtil;

public final class NettyLabServer {
    @ChannelHandler.Sharable
    static final class Discard extends ChannelInboundHandlerAdapter {
        @Override
        public void channelRead(ChannelHandlerContext ctx, Object msg) {
            ReferenceCountUtil.release(msg);
        }

        @Override
        public void exceptionCaught(ChannelHandlerContext ctx, Throwable cause) {
            System.out.println("closed " + ctx.channel() + ": " + cause.getMessage());  // e.g. ALPN refused
            ctx.close();
        }
    }

    public static void main(String[] args) throws Exception {
        Map<String, String> opt = new HashMap<>();
        for (String arg : args) {
            String[] kv = arg.replaceFirst("^--", "").split("=", 2);
            opt.put(kv[0], kv.length > 1 ? kv[1] : "");
        }
        QuicServerCodecBuilder codec = new QuicServerCodecBuilder()
                .sslContext(QuicSslContextBuilder.forServer(new File(opt.get("private-key")), null,
                        new File(opt.get("certificate"))).applicationProtocols(opt.getOrDefault("alpn", "h3").split(",")).build())
                .tokenHandler(InsecureQuicTokenHandler.INSTANCE)
                .handler(new Discard())
                .streamHandler(new Discard());
        if (opt.containsKey("max_idle_timeout")) codec.maxIdleTimeout(Long.parseLong(opt.get("max_idle_timeout")), TimeUnit.MILLISECONDS);
        if (opt.containsKey("initial_max_data")) codec.initialMaxData(Long.parseLong(opt.get("initial_max_data")));
        if (opt.containsKey("initial_max_stream_data_bidi_local")) codec.initialMaxStreamDataBidirectionalLocal(Long.parseLong(opt.get("initial_max_stream_data_bidi_local")));
        if (opt.containsKey("initial_max_stream_data_bidi_remote")) codec.initialMaxStreamDataBidirectionalRemote(Long.parseLong(opt.get("initial_max_stream_data_bidi_remote")));
        if (opt.containsKey("initial_max_stream_data_uni")) codec.initialMaxStreamDataUnidirectional(Long.parseLong(opt.get("initial_max_stream_data_uni")));
        if (opt.containsKey("initial_max_streams_bidi")) codec.initialMaxStreamsBidirectional(Long.parseLong(opt.get("initial_max_streams_bidi")));
        if (opt.containsKey("initial_max_streams_uni")) codec.initialMaxStreamsUnidirectional(Long.parseLong(opt.get("initial_max_streams_uni")));
        if (opt.containsKey("cid-length")) codec.localConnectionIdLength(Integer.parseInt(opt.get("cid-length")));
        if ("true".equals(opt.get("datagrams"))) codec.datagram(16, 16);
        if (opt.containsKey("disable-active-migration")) codec.activeMigration(false);

        NioEventLoopGroup group = new NioEventLoopGroup(1);
        Channel channel = new Bootstrap().group(group).channel(NioDatagramChannel.class).handler(codec.build())
                .bind(new InetSocketAddress(opt.get("host"), Integer.parseInt(opt.get("port")))).sync().channel();
        Runtime.getRuntime().addShutdownHook(new Thread(() -> group.shutdownGracefully(0, 1, TimeUnit.SECONDS).syncUninterruptibly()));
        System.out.println("listening on " + opt.get("host") + ":" + opt.get("port"));
        channel.closeFuture().sync();
    }
}
