package main

import (
	"fmt"
	"path/filepath"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// openTun attaches to the tun device `dev` inside the network namespace
// `netns` (a name under /run/netns or a path). The fd keeps working in that
// namespace after this thread has switched back, so one process can hold
// both ends of the path.
func openTun(netns, dev string) (int, error) {
	if !strings.Contains(netns, "/") {
		netns = filepath.Join("/run/netns", netns)
	}
	runtime.LockOSThread()
	orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread()
		return -1, fmt.Errorf("own netns: %w", err)
	}
	defer unix.Close(orig)
	target, err := unix.Open(netns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread()
		return -1, fmt.Errorf("netns %s: %w", netns, err)
	}
	defer unix.Close(target)
	if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return -1, fmt.Errorf("enter netns %s: %w", netns, err)
	}
	fd, openErr := attach(dev)
	if err := unix.Setns(orig, unix.CLONE_NEWNET); err != nil {
		// Leave the thread locked: the runtime then discards it rather
		// than reuse a thread stuck in the wrong namespace.
		return -1, fmt.Errorf("return from netns %s: %w", netns, err)
	}
	runtime.UnlockOSThread()
	if openErr != nil {
		return -1, fmt.Errorf("tun %s in %s: %w", dev, netns, openErr)
	}
	return fd, nil
}

func attach(dev string) (int, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	ifr, err := unix.NewIfreq(dev)
	if err != nil {
		unix.Close(fd)
		return -1, err
	}
	// IFF_VNET_HDR always: GSO bursts from the other side must be
	// writable here whatever this side's own offloads are.
	ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI | unix.IFF_VNET_HDR)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// setOffloads lets the kernel hand this fd whole GSO bursts (TCP TSO and
// UDP USO) with checksums left to finish, or, with on=false, makes it
// segment and checksum every packet before linkem reads it.
func setOffloads(fd int, on bool) error {
	if !on {
		return unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, 0)
	}
	all := tunFCSUM | tunFTSO4 | tunFTSO6
	if err := unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, all|tunFUSO4|tunFUSO6); err != nil {
		// Kernels before 6.2 know no USO: TCP bursts still help.
		return unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, all)
	}
	return nil
}
