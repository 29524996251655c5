package main

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// maxLine is the longest first line the agent reads, its newline included.
const maxLine = 512

// request is what a host's first line asks for: a workload (a container's name or alias,
// resolved by the engine's DNS, or an IPv4 address) and a port.
type request struct {
	host string
	port uint16
}

// refusal is a reason the agent gives on its NO line (never a secret: names and rules only).
type refusal struct{ reason string }

func (r refusal) Error() string { return r.reason }

func refuse(format string, args ...any) error {
	return refusal{reason: fmt.Sprintf(format, args...)}
}

// parseRequest reads "DIAL <host> <port>" (the newline already taken off).
func parseRequest(line string) (request, error) {
	fields := strings.Split(line, " ")
	if len(fields) != 3 || fields[0] != "DIAL" {
		return request{}, refuse("expected 'DIAL <host> <port>'")
	}
	host, portText := fields[1], fields[2]
	if !validHost(host) {
		return request{}, refuse("bad host name")
	}
	port, err := strconv.ParseUint(portText, 10, 16)
	if err != nil || port == 0 || portText != strconv.FormatUint(port, 10) {
		return request{}, refuse("bad port")
	}
	return request{host: host, port: uint16(port)}, nil
}

// validHost accepts a DNS name (letters, digits, '-', '_', '.'; at most 253 characters, no
// empty label) or an IPv4 literal. Nothing else reaches the resolver.
func validHost(host string) bool {
	if host == "" || len(host) > 253 {
		return false
	}
	for _, label := range strings.Split(host, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, c := range label {
			ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
				c == '-' || c == '_'
			if !ok {
				return false
			}
		}
	}
	return true
}

// parsePool reads the app pool: comma-separated IPv4 CIDR blocks.
func parsePool(text string) ([]netip.Prefix, error) {
	var pool []netip.Prefix
	for _, part := range strings.Split(text, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		prefix, err := netip.ParsePrefix(part)
		if err != nil || !prefix.Addr().Is4() {
			return nil, fmt.Errorf("pool: %q is not an IPv4 CIDR block", part)
		}
		pool = append(pool, prefix.Masked())
	}
	if len(pool) == 0 {
		return nil, errors.New("pool: no CIDR block given")
	}
	return pool, nil
}

func inAny(addr netip.Addr, prefixes []netip.Prefix) bool {
	for _, p := range prefixes {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// checkClient refuses a connection from inside the app pool: an app's container reaches the
// agent's address on its own network, and must never get as far as a handshake.
func checkClient(remote netip.Addr, pool []netip.Prefix) error {
	remote = remote.Unmap()
	if inAny(remote, pool) {
		return refuse("a client inside the app pool")
	}
	return nil
}

// checkTarget says whether the agent may dial addr. own holds the agent's interface
// addresses with their networks' prefixes (say 10.231.3.2/24). It may: an IPv4 address in
// the pool, on one of the networks the agent is joined to, that is not the agent itself,
// nor the network's first address (where Docker puts the bridge's gateway), nor its
// network or broadcast address.
func checkTarget(addr netip.Addr, pool []netip.Prefix, own []netip.Prefix) error {
	addr = addr.Unmap()
	if !addr.Is4() {
		return refuse("%s is not an IPv4 address", addr)
	}
	if !inAny(addr, pool) {
		return refuse("%s is outside the app pool", addr)
	}
	for _, iface := range own {
		if !iface.Addr().Is4() || !iface.Contains(addr) {
			continue
		}
		network := iface.Masked()
		switch {
		case addr == iface.Addr():
			return refuse("%s is the agent itself", addr)
		case addr == network.Addr():
			return refuse("%s is a network address", addr)
		case addr == network.Addr().Next():
			return refuse("%s is a bridge gateway", addr)
		case addr == broadcast(network):
			return refuse("%s is a broadcast address", addr)
		}
		return nil
	}
	return refuse("%s is on no network the agent is joined to", addr)
}

func broadcast(network netip.Prefix) netip.Addr {
	b := network.Addr().As4()
	hostBits := 32 - network.Bits()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	if hostBits < 32 {
		v |= (uint32(1) << hostBits) - 1
	} else {
		v = ^uint32(0)
	}
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}
