// The lab's netty server: QUIC (netty-incubator-codec-quic, quiche inside) on
// ip:port with ALPN h3 (or the list given); it completes handshakes and discards what streams
// carry (HTTP/3 itself is not served: no codec-http3 for quic 0.0.20 is on Maven Central).
// netty's only token handler answers every first Initial with a Retry.
// Flow control from the lab-server command line (LabArgs), transport parameters by their
// RFC 9000 names with dashes:
//   java -jar lab-server.jar IP:443 --cert=C --key=K
//        [--max-idle-timeout=MS --initial-max-data=N --initial-max-stream-data-bidi-local=N
//         --initial-max-stream-data-bidi-remote=N --initial-max-stream-data-uni=N
//         --initial-max-streams-bidi=N --initial-max-streams-uni=N]
//        [--alpn=h3,... --cid-length=N --datagrams=true --disable-active-migration]

import java.io.File;
import java.net.InetSocketAddress;
import java.util.Set;
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
        LabArgs opt = LabArgs.parse("netty", args, Set.of("max-idle-timeout", "initial-max-data",
                "initial-max-stream-data-bidi-local", "initial-max-stream-data-bidi-remote", "initial-max-stream-data-uni",
                "initial-max-streams-bidi", "initial-max-streams-uni", "alpn", "cid-length", "datagrams",
                "disable-active-migration"));
        QuicServerCodecBuilder codec = new QuicServerCodecBuilder()
                .sslContext(QuicSslContextBuilder.forServer(new File(opt.get("key", null)), null,
                        new File(opt.get("cert", null))).applicationProtocols(opt.get("alpn", "h3").split(",")).build())
                .tokenHandler(InsecureQuicTokenHandler.INSTANCE)
                .handler(new Discard())
                .streamHandler(new Discard());
        if (opt.has("max-idle-timeout")) codec.maxIdleTimeout(opt.number("max-idle-timeout"), TimeUnit.MILLISECONDS);
        if (opt.has("initial-max-data")) codec.initialMaxData(opt.number("initial-max-data"));
        if (opt.has("initial-max-stream-data-bidi-local")) codec.initialMaxStreamDataBidirectionalLocal(opt.number("initial-max-stream-data-bidi-local"));
        if (opt.has("initial-max-stream-data-bidi-remote")) codec.initialMaxStreamDataBidirectionalRemote(opt.number("initial-max-stream-data-bidi-remote"));
        if (opt.has("initial-max-stream-data-uni")) codec.initialMaxStreamDataUnidirectional(opt.number("initial-max-stream-data-uni"));
        if (opt.has("initial-max-streams-bidi")) codec.initialMaxStreamsBidirectional(opt.number("initial-max-streams-bidi"));
        if (opt.has("initial-max-streams-uni")) codec.initialMaxStreamsUnidirectional(opt.number("initial-max-streams-uni"));
        if (opt.has("cid-length")) codec.localConnectionIdLength((int) opt.number("cid-length"));
        if ("true".equals(opt.get("datagrams", null))) codec.datagram(16, 16);
        if (opt.has("disable-active-migration")) codec.activeMigration(false);

        NioEventLoopGroup group = new NioEventLoopGroup(1);
        Channel channel = new Bootstrap().group(group).channel(NioDatagramChannel.class).handler(codec.build())
                .bind(new InetSocketAddress(opt.host, opt.port)).sync().channel();
        Runtime.getRuntime().addShutdownHook(new Thread(() -> group.shutdownGracefully(0, 1, TimeUnit.SECONDS).syncUninterruptibly()));
        System.out.println("listening on " + opt.host + ":" + opt.port);
        channel.closeFuture().sync();
    }
}
