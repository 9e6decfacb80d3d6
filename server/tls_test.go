package server_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/dpd-dev/dpd/client"
	dpdv1 "github.com/dpd-dev/dpd/proto/dpd/v1"
	"github.com/dpd-dev/dpd/server"
	"github.com/dpd-dev/dpd/server/servertest"
)

// pki writes a CA and leaf certificates signed by it into dir.
type pki struct {
	dir  string
	ca   *x509.Certificate
	key  *ecdsa.PrivateKey
	next int64
}

func newPKI(t *testing.T, dir, name string) *pki {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(der)
	p := &pki{dir: dir, ca: ca, key: key, next: 2}
	writePEM(t, filepath.Join(dir, name+".pem"), "CERTIFICATE", der)
	return p
}

// leaf issues a certificate for name (a server for 127.0.0.1 when server)
// and returns its cert and key paths.
func (p *pki) leaf(t *testing.T, name string, isServer bool) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(p.next), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	p.next++
	if isServer {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(p.dir, name+".pem"), filepath.Join(p.dir, name+"-key.pem")
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "EC PRIVATE KEY", kder)
	return certFile, keyFile
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestTCPRequiresClientCertificate: over TCP dpd speaks mTLS only; a client
// with a certificate from the trusted CA gets in, one from another CA and
// a plaintext one do not.
func TestTCPRequiresClientCertificate(t *testing.T) {
	dir := t.TempDir()
	trusted, rogue := newPKI(t, dir, "ca"), newPKI(t, dir, "rogue-ca")
	srvCert, srvKey := trusted.leaf(t, "dpd", true)
	goodCert, goodKey := trusted.leaf(t, "controller", false)
	badCert, badKey := rogue.leaf(t, "intruder", false)
	caFile := filepath.Join(dir, "ca.pem")
	addr := freeAddr(t)
	servertest.StartConfig(t, server.Config{ListenTCP: addr, TLSCert: srvCert, TLSKey: srvKey, TLSClientCA: caFile})

	call := func(opts ...client.Option) error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c, err := client.Dial(ctx, addr, append(opts, client.WithLazy())...)
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Inspect().GetStatus(ctx, &dpdv1.GetStatusRequest{})
		return err
	}
	if err := call(client.WithTLS(goodCert, goodKey, caFile)); err != nil {
		t.Errorf("trusted client: %v", err)
	}
	if err := call(client.WithTLS(badCert, badKey, caFile)); err == nil {
		t.Error("a client certificate from another CA was accepted")
	}
	if err := call(client.WithInsecure()); err == nil {
		t.Error("a plaintext client was accepted")
	}
}
