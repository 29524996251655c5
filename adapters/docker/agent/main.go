// Command pando-agent lets a host reach workloads on one Docker engine: one container per
// engine and owner, joined to every app network of that owner, publishing one port.
//
// A client connects with TLS 1.3 and a certificate issued by an authority in clients.pem,
// then sends one line, "DIAL <host> <port>\n". The agent resolves the host through the
// engine's DNS (a container's name on a network it is joined to) or takes an IPv4 address,
// and dials it only when every address is in the app pool, on a network the agent is
// joined to, and neither the agent itself nor a bridge gateway. It answers "OK\n" and relays
// bytes both ways, or "NO <reason>\n" and closes. Connections from inside the app pool are
// closed before the handshake. Standard library only; see docs/docker.md, "The agent".
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"io"
	"log"
	"net"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

type settings struct {
	pool      []netip.Prefix
	handshake time.Duration
	dial      time.Duration
	idle      time.Duration
}

var logger = log.New(os.Stderr, "pando-agent: ", log.LstdFlags|log.LUTC)

func logf(format string, args ...any) { logger.Printf(format, args...) }

func main() {
	listen := flag.String("listen", ":7443", "address to listen on")
	dir := flag.String("dir", "/etc/pando-agent", "folder holding agent.pem and clients.pem")
	poolText := flag.String("pool", "", "the app pool: comma-separated IPv4 CIDR blocks")
	handshake := flag.Duration("handshake-timeout", 10*time.Second, "time for the handshake and the first line")
	dial := flag.Duration("dial-timeout", 5*time.Second, "time to resolve and connect to a target")
	idle := flag.Duration("idle-timeout", 10*time.Minute, "a relay with no byte either way for this long ends")
	maxConns := flag.Int("max-conns", 512, "connections served at once (more are closed at once)")
	flag.Parse()

	pool, err := parsePool(*poolText)
	if err != nil {
		logger.Fatal(err)
	}
	creds := &credentials{dir: *dir}
	if _, _, err := creds.current(); err != nil {
		logger.Fatalf("credentials in %s: %v", *dir, err)
	}
	listener, err := net.Listen("tcp", *listen)
	if err != nil {
		logger.Fatal(err)
	}
	logf("listening on %s, pool %v", listener.Addr(), pool)
	s := settings{pool: pool, handshake: *handshake, dial: *dial, idle: *idle}
	serve(listener, creds.tlsConfig(), s, *maxConns)
}

func serve(listener net.Listener, config *tls.Config, s settings, maxConns int) {
	slots := make(chan struct{}, maxConns)
	for {
		conn, err := listener.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			logf("accept: %v", err)
			time.Sleep(50 * time.Millisecond) // out of descriptors: let some close
			continue
		}
		select {
		case slots <- struct{}{}:
			go func() {
				defer func() { <-slots }()
				handle(conn, config, s)
			}()
		default:
			logf("%s: refused, %d connections already", conn.RemoteAddr(), maxConns)
			conn.Close()
		}
	}
}

func handle(raw net.Conn, config *tls.Config, s settings) {
	defer raw.Close()
	defer func() {
		if r := recover(); r != nil { // a bug must cost one connection, never the agent
			logf("%s: internal error: %v", raw.RemoteAddr(), r)
		}
	}()
	remote, err := netip.ParseAddrPort(raw.RemoteAddr().String())
	if err != nil {
		return
	}
	if err := checkClient(remote.Addr(), s.pool); err != nil {
		logf("%s: closed: %v", remote, err)
		return
	}
	raw.SetDeadline(time.Now().Add(s.handshake))
	conn := tls.Server(raw, config)
	if err := conn.Handshake(); err != nil {
		logf("%s: handshake failed: %v", remote, err)
		return
	}
	reader := bufio.NewReaderSize(conn, maxLine)
	line, err := reader.ReadSlice('\n')
	if err != nil {
		logf("%s: no first line: %v", remote, err)
		answer(conn, "NO expected one line 'DIAL <host> <port>'")
		return
	}
	req, err := parseRequest(string(line[:len(line)-1]))
	if err != nil {
		logf("%s: refused: %v", remote, err)
		answer(conn, "NO "+err.Error())
		return
	}
	target, err := connect(req, s)
	if err != nil {
		logf("%s: %s:%d refused: %v", remote, req.host, req.port, err)
		answer(conn, "NO "+err.Error())
		return
	}
	defer target.Close()
	if !answer(conn, "OK") {
		return
	}
	raw.SetDeadline(time.Time{})
	logf("%s: relaying to %s:%d (%s)", remote, req.host, req.port, target.RemoteAddr())
	relay(conn, reader, target, s.idle)
}

func answer(conn *tls.Conn, line string) bool {
	_, err := conn.Write([]byte(line + "\n"))
	return err == nil
}

// connect resolves the target, checks every address it resolves to, and dials the first.
func connect(req request, s settings) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.dial)
	defer cancel()
	var addrs []netip.Addr
	if literal, err := netip.ParseAddr(req.host); err == nil {
		addrs = []netip.Addr{literal}
	} else {
		addrs, err = net.DefaultResolver.LookupNetIP(ctx, "ip4", req.host)
		if err != nil || len(addrs) == 0 {
			return nil, refuse("%s does not resolve", req.host)
		}
	}
	own, err := ownPrefixes()
	if err != nil {
		return nil, refuse("cannot read the agent's networks")
	}
	for _, addr := range addrs {
		if err := checkTarget(addr, s.pool, own); err != nil {
			return nil, err
		}
	}
	address := net.JoinHostPort(addrs[0].Unmap().String(), strconv.Itoa(int(req.port)))
	var dialer net.Dialer
	target, err := dialer.DialContext(ctx, "tcp4", address)
	if err != nil {
		return nil, refuse("cannot connect to %s", address)
	}
	return target, nil
}

// ownPrefixes lists the agent's addresses with their networks, read at each connection:
// the adapter joins the agent to app networks while it runs.
func ownPrefixes() ([]netip.Prefix, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	var own []netip.Prefix
	for _, a := range addrs {
		ipnet, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		addr, ok := netip.AddrFromSlice(ipnet.IP)
		if !ok {
			continue
		}
		bits, _ := ipnet.Mask.Size()
		own = append(own, netip.PrefixFrom(addr.Unmap(), bits))
	}
	return own, nil
}

// relay copies both ways until both sides have ended, half-closing each side as its peer
// ends; it ends both when no byte moved either way for idle.
func relay(client *tls.Conn, fromClient io.Reader, target net.Conn, idle time.Duration) {
	var last atomic.Int64
	last.Store(time.Now().UnixNano())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		pump(target, fromClient, client, &last, idle)
		if tcp, ok := target.(*net.TCPConn); ok {
			tcp.CloseWrite()
		}
	}()
	go func() {
		defer wg.Done()
		pump(client, target, target, &last, idle)
		client.CloseWrite()
	}()
	wg.Wait()
}

// pump copies src to dst; deadlines are set on srcConn, and a timeout ends the copy only
// when neither direction moved a byte for idle.
func pump(dst io.Writer, src io.Reader, srcConn net.Conn, last *atomic.Int64, idle time.Duration) {
	buf := make([]byte, 32*1024)
	for {
		srcConn.SetReadDeadline(time.Now().Add(idle))
		n, err := src.Read(buf)
		if n > 0 {
			last.Store(time.Now().UnixNano())
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() &&
				time.Since(time.Unix(0, last.Load())) < idle {
				continue
			}
			return
		}
	}
}
