package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"math/big"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseRequest(t *testing.T) {
	good := map[string]request{
		"DIAL pando.shop.web 8080": {"pando.shop.web", 8080},
		"DIAL 10.231.0.5 1":        {"10.231.0.5", 1},
		"DIAL web 65535":           {"web", 65535},
	}
	for line, want := range good {
		got, err := parseRequest(line)
		if err != nil || got != want {
			t.Errorf("parseRequest(%q) = %v, %v; want %v", line, got, err, want)
		}
	}
	bad := []string{
		"", "DIAL", "DIAL web", "DIAL web 80 extra", "dial web 80", "DIAL  web 80",
		"DIAL web 0", "DIAL web 65536", "DIAL web -1", "DIAL web 080", "DIAL web +80",
		"DIAL web 8o", "DIAL web\t80", "DIAL we/b 80", "DIAL a..b 80", "DIAL .web 80",
		"DIAL [::1] 80", "DIAL ::1 80", "DIAL web 80\r", "DIAL " + strings.Repeat("a", 64) + " 80",
		"DIAL web%00 80", "DIAL wéb 80",
	}
	for _, line := range bad {
		if got, err := parseRequest(line); err == nil {
			t.Errorf("parseRequest(%q) = %v, want a refusal", line, got)
		}
	}
}

func TestParsePool(t *testing.T) {
	pool, err := parsePool("10.231.0.0/16, 10.232.0.0/16")
	if err != nil || len(pool) != 2 {
		t.Fatalf("parsePool: %v, %v", pool, err)
	}
	for _, bad := range []string{"", "10.231.0.0", "fd00::/8", "nonsense"} {
		if _, err := parsePool(bad); err == nil {
			t.Errorf("parsePool(%q) accepted", bad)
		}
	}
}

func TestCheckTarget(t *testing.T) {
	pool := []netip.Prefix{netip.MustParsePrefix("10.231.0.0/16")}
	own := []netip.Prefix{
		netip.MustParsePrefix("127.0.0.1/8"),
		netip.MustParsePrefix("172.30.0.2/16"), // the agent's own network, outside the pool
		netip.MustParsePrefix("10.231.3.7/24"), // joined to an app network
		netip.MustParsePrefix("10.231.4.2/26"), // and another
	}
	allowed := []string{"10.231.3.2", "10.231.3.254", "10.231.4.3", "10.231.4.62", "::ffff:10.231.3.9"}
	for _, a := range allowed {
		if err := checkTarget(netip.MustParseAddr(a), pool, own); err != nil {
			t.Errorf("checkTarget(%s) refused: %v", a, err)
		}
	}
	refused := map[string]string{
		"10.231.3.7":      "the agent itself",
		"10.231.3.1":      "a bridge gateway",
		"10.231.4.1":      "a bridge gateway",
		"10.231.3.0":      "a network address",
		"10.231.3.255":    "a broadcast address",
		"10.231.4.63":     "a broadcast address",
		"10.231.5.9":      "on no network the agent is joined to",
		"172.30.0.5":      "outside the app pool",
		"127.0.0.1":       "outside the app pool",
		"203.0.113.10":    "outside the app pool",
		"169.254.169.254": "outside the app pool",
		"fd00::1":         "not an IPv4 address",
	}
	for a, why := range refused {
		err := checkTarget(netip.MustParseAddr(a), pool, own)
		if err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("checkTarget(%s) = %v, want %q", a, err, why)
		}
	}
}

func TestCheckClient(t *testing.T) {
	pool := []netip.Prefix{netip.MustParsePrefix("10.231.0.0/16")}
	if checkClient(netip.MustParseAddr("10.231.9.9"), pool) == nil {
		t.Error("a client inside the pool was let in")
	}
	if checkClient(netip.MustParseAddr("::ffff:10.231.9.9"), pool) == nil {
		t.Error("a mapped client inside the pool was let in")
	}
	if err := checkClient(netip.MustParseAddr("198.19.96.1"), pool); err != nil {
		t.Errorf("a host outside the pool was refused: %v", err)
	}
}

func TestCredentialsFollowTheirFiles(t *testing.T) {
	dir := t.TempDir()
	creds := &credentials{dir: dir}
	if _, _, err := creds.current(); err == nil {
		t.Fatal("credentials without files were accepted")
	}
	first, firstCA := testPair(t), testPair(t)
	writeCreds(t, dir, first, firstCA)
	cert, _, err := creds.current()
	if err != nil {
		t.Fatalf("first credentials: %v", err)
	}
	// Same size, other bytes (a renewal): read again at once.
	second := testPair(t)
	writeCreds(t, dir, second, firstCA)
	renewed, _, err := creds.current()
	if err != nil || bytes.Equal(renewed.Certificate[0], cert.Certificate[0]) {
		t.Fatalf("renewed credentials not read: %v", err)
	}
	// A half-written file keeps the previous credentials.
	os.WriteFile(filepath.Join(dir, "agent.pem"), []byte("-----BEGIN"), 0o600)
	kept, _, err := creds.current()
	if err != nil || !bytes.Equal(kept.Certificate[0], renewed.Certificate[0]) {
		t.Fatalf("a broken file replaced the credentials: %v", err)
	}
}

func testPair(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	template := &x509.Certificate{SerialNumber: big.NewInt(1), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, template, template, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})...)
}

func writeCreds(t *testing.T, dir string, pair, ca []byte) {
	t.Helper()
	caCert := ca[:bytes.Index(ca, []byte("-----BEGIN PRIVATE KEY"))]
	if err := os.WriteFile(filepath.Join(dir, "agent.pem"), pair, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "clients.pem"), caCert, 0o600); err != nil {
		t.Fatal(err)
	}
}
