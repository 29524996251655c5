package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"sync"
)

// credentials holds the agent's certificate and the authorities it trusts for clients, read
// from files the adapter writes (agent.pem: certificate chain and key; clients.pem: one or
// more CA certificates). The files are read at each handshake (about a kilobyte each) and
// parsed again when their bytes changed, so the adapter renews the certificate, or trusts
// another authority, without restarting the agent, from the next connection on. Files that
// do not parse (half written) leave the previous credentials in use.
type credentials struct {
	dir string

	mu      sync.Mutex
	pair    []byte
	bundle  []byte
	cert    *tls.Certificate
	clients *x509.CertPool
}

// current returns the credentials, parsed again when the files changed.
func (c *credentials) current() (*tls.Certificate, *x509.CertPool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	pair, err := os.ReadFile(filepath.Join(c.dir, "agent.pem"))
	if err != nil {
		return c.fallback(err)
	}
	bundle, err := os.ReadFile(filepath.Join(c.dir, "clients.pem"))
	if err != nil {
		return c.fallback(err)
	}
	if c.cert != nil && bytes.Equal(pair, c.pair) && bytes.Equal(bundle, c.bundle) {
		return c.cert, c.clients, nil
	}
	cert, err := tls.X509KeyPair(pair, pair)
	if err != nil {
		return c.fallback(err)
	}
	clients := x509.NewCertPool()
	if !clients.AppendCertsFromPEM(bundle) {
		return c.fallback(errors.New("clients.pem holds no certificate"))
	}
	c.cert, c.clients, c.pair, c.bundle = &cert, clients, pair, bundle
	return c.cert, c.clients, nil
}

func (c *credentials) fallback(err error) (*tls.Certificate, *x509.CertPool, error) {
	if c.cert == nil {
		return nil, nil, err
	}
	logf("credentials: keeping the previous ones: %v", err)
	return c.cert, c.clients, nil
}

// tlsConfig asks for TLS 1.3 and a client certificate issued by a trusted authority.
func (c *credentials) tlsConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			cert, clients, err := c.current()
			if err != nil {
				return nil, err
			}
			return &tls.Config{
				MinVersion:   tls.VersionTLS13,
				Certificates: []tls.Certificate{*cert},
				ClientAuth:   tls.RequireAndVerifyClientCert,
				ClientCAs:    clients,
			}, nil
		},
	}
}
