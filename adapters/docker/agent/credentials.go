package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// credentials holds the agent's certificate and the authorities it trusts for clients, read
// from files the adapter writes (agent.pem: certificate chain and key; clients.pem: one or
// more CA certificates). The files are read again when they change, so the adapter renews
// the certificate, or trusts another authority, without restarting the agent; a file that
// does not parse (half written) leaves the previous credentials in use.
type credentials struct {
	dir string

	mu      sync.Mutex
	checked time.Time
	stamp   string
	cert    *tls.Certificate
	clients *x509.CertPool
}

func (c *credentials) paths() (string, string) {
	return filepath.Join(c.dir, "agent.pem"), filepath.Join(c.dir, "clients.pem")
}

// current returns the credentials, reloaded at most once a second when the files changed.
func (c *credentials) current() (*tls.Certificate, *x509.CertPool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cert != nil && time.Since(c.checked) < time.Second {
		return c.cert, c.clients, nil
	}
	c.checked = time.Now()
	certPath, clientsPath := c.paths()
	stamp, err := fileStamp(certPath, clientsPath)
	if err != nil || stamp == c.stamp {
		if c.cert == nil {
			return nil, nil, errors.New("no credentials yet: " + errText(err))
		}
		return c.cert, c.clients, nil
	}
	pair, err := os.ReadFile(certPath)
	if err != nil {
		return c.fallback(err)
	}
	cert, err := tls.X509KeyPair(pair, pair)
	if err != nil {
		return c.fallback(err)
	}
	bundle, err := os.ReadFile(clientsPath)
	if err != nil {
		return c.fallback(err)
	}
	clients := x509.NewCertPool()
	if !clients.AppendCertsFromPEM(bundle) {
		return c.fallback(errors.New("clients.pem holds no certificate"))
	}
	c.cert, c.clients, c.stamp = &cert, clients, stamp
	return c.cert, c.clients, nil
}

func (c *credentials) fallback(err error) (*tls.Certificate, *x509.CertPool, error) {
	if c.cert == nil {
		return nil, nil, err
	}
	logf("credentials: keeping the previous ones: %v", err)
	return c.cert, c.clients, nil
}

func fileStamp(paths ...string) (string, error) {
	stamp := ""
	for _, p := range paths {
		info, err := os.Stat(p)
		if err != nil {
			return "", err
		}
		stamp += fmt.Sprintf("%d/%d;", info.ModTime().UnixNano(), info.Size())
	}
	return stamp, nil
}

func errText(err error) string {
	if err == nil {
		return "unchanged"
	}
	return err.Error()
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
