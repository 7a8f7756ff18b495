package main

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func TestBernoulliRate(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	b := &Bernoulli{P: 0.01}
	drops := 0
	const n = 200000
	for i := 0; i < n; i++ {
		if b.Drop(rng) {
			drops++
		}
	}
	// 200k samples at 1%: standard deviation 44.5, allow 5 sigma.
	if math.Abs(float64(drops)-2000) > 225 {
		t.Fatalf("dropped %d of %d, want about 2000", drops, n)
	}
}

func TestGilbertElliottStationaryAndBursty(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	g := &GilbertElliott{P: 0.01, R: 0.25, LossBad: 1, LossGood: 0}
	want := g.StationaryLoss() // 0.01/0.26 = 3.85%
	const n = 400000
	drops, runs, prev := 0, 0, false
	for i := 0; i < n; i++ {
		d := g.Drop(rng)
		if d {
			drops++
			if !prev {
				runs++
			}
		}
		prev = d
	}
	got := float64(drops) / n
	if math.Abs(got-want) > 0.1*want {
		t.Fatalf("loss %.4f, want %.4f", got, want)
	}
	// Bad state lasts 1/R = 4 packets on average: losses come in bursts,
	// unlike Bernoulli where the mean run is barely above 1.
	if mean := float64(drops) / float64(runs); mean < 3 || mean > 5 {
		t.Fatalf("mean loss burst %.2f packets, want about 4", mean)
	}
}

func TestShaperPacesAtRate(t *testing.T) {
	s := Shaper{RateBitsPerSec: 8e6} // 1 byte per microsecond
	var last int64
	for i := 0; i < 10; i++ {
		d, ok := s.Admit(0, 1000)
		if !ok {
			t.Fatal("unlimited queue dropped")
		}
		last = d
	}
	if last != int64(10*time.Millisecond) {
		t.Fatalf("10 x 1000 B at 8 Mbit/s leave at %v, want 10ms", time.Duration(last))
	}
	// An idle link sends at once after the backlog drained.
	if d, _ := s.Admit(int64(time.Second), 1000); d != int64(time.Second+time.Millisecond) {
		t.Fatalf("idle link departure %v", time.Duration(d))
	}
}

func TestShaperDropTailByPacketsAndBytes(t *testing.T) {
	s := Shaper{RateBitsPerSec: 8e6, LimitPackets: 3}
	admitted := 0
	for i := 0; i < 5; i++ {
		if _, ok := s.Admit(0, 1000); ok {
			admitted++
		}
	}
	if admitted != 3 {
		t.Fatalf("admitted %d with a 3-packet queue", admitted)
	}
	// After the first packet left (1 ms), one slot is free again.
	if _, ok := s.Admit(int64(time.Millisecond), 1000); !ok {
		t.Fatal("slot not freed after departure")
	}
	if p, b := s.Backlog(int64(time.Millisecond)); p != 3 || b != 3000 {
		t.Fatalf("backlog %d packets %d bytes", p, b)
	}
	sb := Shaper{RateBitsPerSec: 8e6, LimitBytes: 2500}
	ok1, ok2, ok3 := admit(&sb), admit(&sb), admit(&sb)
	if !ok1 || !ok2 || ok3 {
		t.Fatalf("byte limit 2500 with 1000 B packets: %v %v %v", ok1, ok2, ok3)
	}
}

func admit(s *Shaper) bool { _, ok := s.Admit(0, 1000); return ok }

func TestShaperUnlimitedPassesAtOnce(t *testing.T) {
	s := Shaper{}
	if d, ok := s.Admit(42, 1500); !ok || d != 42 {
		t.Fatalf("unlimited shaper: %d %v", d, ok)
	}
}

func TestPathModelDelayJitterKeepsOrder(t *testing.T) {
	m := pathModel{cfg: DirectionConfig{Delay: 30 * time.Millisecond, Jitter: 5 * time.Millisecond},
		rng: rand.New(rand.NewPCG(5, 6))}
	var prev int64
	var sum float64
	const n = 10000
	for i := 0; i < n; i++ {
		// 20 ms apart: wider than the jitter range, so keeping order
		// never shifts a packet and the mean must be the configured delay.
		now := int64(i) * int64(20*time.Millisecond)
		due, v := m.decide(now, 100)
		if v != deliver {
			t.Fatal("no loss configured but not delivered")
		}
		if due < prev {
			t.Fatal("jitter reordered packets")
		}
		if d := due - now; d < int64(25*time.Millisecond) || d > int64(35*time.Millisecond) {
			t.Fatalf("delay %v outside 30ms +- 5ms", time.Duration(d))
		}
		sum += float64(due - now)
		prev = due
	}
	if mean := sum / n / 1e6; mean < 29.8 || mean > 30.2 {
		t.Fatalf("mean delay %.2f ms", mean)
	}
	// Dense traffic: jitter must still never reorder.
	for i := 0; i < n; i++ {
		now := int64(n)*int64(20*time.Millisecond) + int64(i)*int64(100*time.Microsecond)
		due, _ := m.decide(now, 100)
		if due < prev {
			t.Fatal("jitter reordered dense packets")
		}
		prev = due
	}
}

func TestPathModelReorderSkipsDelay(t *testing.T) {
	m := pathModel{cfg: DirectionConfig{Delay: 30 * time.Millisecond, ReorderP: 0.25},
		rng: rand.New(rand.NewPCG(7, 8))}
	now := 0
	counts := map[verdict]int{}
	for i := 0; i < 20000; i++ {
		due, v := m.decide(int64(now), 100)
		counts[v]++
		if v == deliverNow && due != int64(now) {
			t.Fatal("reordered packet was delayed")
		}
	}
	if f := float64(counts[deliverNow]) / 20000; f < 0.23 || f > 0.27 {
		t.Fatalf("reordered fraction %.3f, want 0.25", f)
	}
}

func TestHistogramQuantiles(t *testing.T) {
	var h errorHistogram
	for i := 0; i < 99; i++ {
		h.Add(500) // 0.5 us
	}
	h.Add(int64(3 * time.Millisecond))
	if q := h.Quantile(0.5); q != 1 {
		t.Fatalf("p50 %v us", q)
	}
	if q := h.Quantile(1); q != 3001 {
		t.Fatalf("max bucket %v us", q)
	}
}

func TestHistogramCountsEarlyAsError(t *testing.T) {
	var h errorHistogram
	h.Add(-int64(5 * time.Microsecond))
	if q := h.Quantile(1); q != 6 {
		t.Fatalf("5 us early lands in bucket %v us, want 6", q)
	}
}

// frame builds a virtio_net_hdr plus an IPv4 packet with a UDP or TCP
// header and `payload` bytes, as linkem reads it from a tun fd.
func frame(gsoType byte, gsoSize uint16, proto byte, payload int) []byte {
	l4 := 8
	if proto == 6 {
		l4 = 32 // TCP with timestamps: data offset 8 words
	}
	f := make([]byte, vnetHdrLen+20+l4+payload)
	f[1] = gsoType
	f[4], f[5] = byte(gsoSize), byte(gsoSize>>8)
	ip := f[vnetHdrLen:]
	ip[0], ip[9] = 0x45, proto
	if proto == 6 {
		ip[20+12] = 8 << 4
	}
	return f
}

func TestWireSegmentsCountsEachPacketOfABurst(t *testing.T) {
	cases := []struct {
		name          string
		frame         []byte
		packets, size int
	}{
		{"plain UDP", frame(vnetGSONone, 0, 17, 1200), 1, 20 + 8 + 1200},
		// quic-go style: 10 datagrams of 1200 B and a short last one.
		{"UDP GSO", frame(vnetGSOUDPL4, 1200, 17, 10*1200+300), 11, 11*28 + 10*1200 + 300},
		{"TCP TSO", frame(vnetGSOTCPv4, 1448, 6, 4*1448), 4, 4*(20+32) + 4*1448},
		{"TSO with ECN bit", frame(vnetGSOTCPv4|vnetGSOECN, 1448, 6, 2*1448), 2, 2*52 + 2*1448},
		{"GSO type but not IP", append(make([]byte, vnetHdrLen), 0x00, 1, 2), 1, 3},
	}
	for _, c := range cases {
		if c.name == "GSO type but not IP" {
			c.frame[1], c.frame[4] = vnetGSOUDPL4, 100
		}
		p, b := wireSegments(c.frame)
		if p != c.packets || b != c.size {
			t.Errorf("%s: %d packets %d bytes, want %d and %d", c.name, p, b, c.packets, c.size)
		}
	}
}

func TestOnlyAPureDelayTakesBurstsWhole(t *testing.T) {
	if !(DirectionConfig{Delay: 30 * time.Millisecond}).treatsBurstsAlike() {
		t.Fatal("a pure delay must take GSO bursts whole")
	}
	for name, c := range map[string]DirectionConfig{
		"loss":    {Loss: &Bernoulli{P: 0.01}},
		"rate":    {Shaper: Shaper{RateBitsPerSec: 1e9}},
		"jitter":  {Delay: time.Millisecond, Jitter: time.Millisecond},
		"reorder": {Delay: time.Millisecond, ReorderP: 0.1},
	} {
		if c.treatsBurstsAlike() {
			t.Errorf("%s acts per wire packet but would take bursts whole", name)
		}
	}
}

func TestBufferPoolsReuseBySize(t *testing.T) {
	b := newBufferPools(1500, 4)
	small, big := b.get(100), b.get(20000)
	if len(small.buf) != vnetHdrLen+1500 || len(big.buf) != maxFrame {
		t.Fatalf("sizes %d and %d", len(small.buf), len(big.buf))
	}
	b.put(small)
	b.put(big)
	if b.get(1510) != small || b.get(1511) != big {
		t.Fatal("returned buffers were not reused by size")
	}
}

// udpFrame is a virtio_net_hdr plus an IPv4/UDP datagram from port 1000
// to srcPort+1 whose payload bytes all equal fill.
func udpFrame(srcPort uint16, payload int, fill byte) []byte {
	f := frame(vnetGSONone, 0, 17, payload)
	ip := f[vnetHdrLen:]
	ip[8] = 64
	copy(ip[12:20], []byte{198, 18, 100, 2, 198, 18, 100, 1})
	binary.BigEndian.PutUint16(ip[2:4], uint16(len(ip)))
	binary.BigEndian.PutUint16(ip[20:22], srcPort)
	binary.BigEndian.PutUint16(ip[22:24], srcPort+1)
	binary.BigEndian.PutUint16(ip[24:26], uint16(8+payload))
	for i := 28; i < len(ip); i++ {
		ip[i] = fill
	}
	return f
}

func TestCoalesceMergesOneFlowIntoAUDPBurst(t *testing.T) {
	frames := [][]byte{udpFrame(1000, 100, 'a'), udpFrame(1000, 100, 'b'), udpFrame(1000, 60, 'c'),
		udpFrame(1000, 100, 'd')}
	out := make([]byte, maxFrame)
	n, used := coalesce(out, frames)
	if used != 3 {
		t.Fatalf("merged %d datagrams, want 3 (a shorter one ends the burst)", used)
	}
	burst := out[vnetHdrLen:n]
	if len(burst) != 28+260 || int(binary.BigEndian.Uint16(burst[2:4])) != len(burst) {
		t.Fatalf("IP length %d (header says %d)", len(burst), binary.BigEndian.Uint16(burst[2:4]))
	}
	if fold(addWords(0, burst[:20])) != 0xffff {
		t.Fatal("IPv4 header checksum does not verify")
	}
	if out[1] != vnetGSOUDPL4 || binary.LittleEndian.Uint16(out[4:6]) != 100 || out[0] != 1 ||
		binary.LittleEndian.Uint16(out[6:8]) != 20 || binary.LittleEndian.Uint16(out[8:10]) != 6 {
		t.Fatalf("virtio_net_hdr % x", out[:vnetHdrLen])
	}
	if binary.BigEndian.Uint16(burst[24:26]) != 8+260 {
		t.Fatal("UDP length not the burst's")
	}
	pseudo := fold(addWords(0, burst[12:20]) + 17 + 8 + 260)
	if binary.BigEndian.Uint16(burst[26:28]) != pseudo {
		t.Fatal("UDP checksum field is not the pseudo-header sum")
	}
	if string(burst[28:28+100]) != strings.Repeat("a", 100) || string(burst[128:228]) != strings.Repeat("b", 100) ||
		string(burst[228:]) != strings.Repeat("c", 60) {
		t.Fatal("payloads not concatenated in order")
	}
	// Another flow, a GSO burst or a larger datagram is never merged.
	for name, second := range map[string][]byte{"other port": udpFrame(2000, 100, 'x'),
		"larger": udpFrame(1000, 120, 'x'), "burst": frame(vnetGSOUDPL4, 100, 17, 300)} {
		if n, used := coalesce(out, [][]byte{udpFrame(1000, 100, 'a'), second}); n != 0 || used != 1 {
			t.Errorf("%s: merged (%d, %d)", name, n, used)
		}
	}
}
