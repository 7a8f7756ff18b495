package main

import "encoding/binary"

// With IFF_VNET_HDR every packet crossing a tun fd is preceded by a
// virtio_net_hdr. It lets the kernel hand linkem whole GSO/TSO bursts (one
// read for up to 64 KB that a sender passed down as one UDP_SEGMENT or TSO
// send) with the checksum left to finish, and lets linkem write them on as
// such: the receiving stack segments or coalesces them itself. The header
// goes through unchanged.
const vnetHdrLen = 10

const (
	vnetGSONone  = 0
	vnetGSOTCPv4 = 1
	vnetGSOUDP   = 3 // UFO, never offered: TUN_F_UFO is not requested
	vnetGSOTCPv6 = 4
	vnetGSOUDPL4 = 5
	vnetGSOECN   = 0x80

	// TUNSETOFFLOAD flags (linux/if_tun.h); x/sys/unix does not name them.
	tunFCSUM = 0x01
	tunFTSO4 = 0x02
	tunFTSO6 = 0x04
	tunFUSO4 = 0x20
	tunFUSO6 = 0x40
)

// wireSegments is how many packets, and how many bytes with their own
// headers, a packet read from a vnet-header tun fd is on a wire of MTU
// sized links: 1 and its length unless the header marks it a GSO burst.
// frame starts with the virtio_net_hdr.
func wireSegments(frame []byte) (packets, bytes int) {
	if len(frame) < vnetHdrLen {
		return 1, len(frame)
	}
	pkt := frame[vnetHdrLen:]
	gsoType := frame[1] &^ vnetGSOECN
	gsoSize := int(binary.LittleEndian.Uint16(frame[4:6]))
	if gsoType == vnetGSONone || gsoSize == 0 {
		return 1, len(pkt)
	}
	headers := packetHeaders(pkt)
	if headers == 0 || headers >= len(pkt) {
		return 1, len(pkt)
	}
	payload := len(pkt) - headers
	packets = (payload + gsoSize - 1) / gsoSize
	return packets, len(pkt) + (packets-1)*headers
}

// packetHeaders is the length of the IP and TCP/UDP headers of an IPv4 or
// IPv6 packet (IPv6 without extension headers), 0 if it is neither.
func packetHeaders(pkt []byte) int {
	if len(pkt) < 1 {
		return 0
	}
	var ipLen int
	var proto byte
	switch pkt[0] >> 4 {
	case 4:
		if len(pkt) < 20 {
			return 0
		}
		ipLen, proto = int(pkt[0]&0x0f)*4, pkt[9]
	case 6:
		if len(pkt) < 40 {
			return 0
		}
		ipLen, proto = 40, pkt[6]
	default:
		return 0
	}
	switch proto {
	case 17: // UDP
		return ipLen + 8
	case 6: // TCP
		if len(pkt) < ipLen+13 {
			return 0
		}
		return ipLen + int(pkt[ipLen+12]>>4)*4
	}
	return 0
}
