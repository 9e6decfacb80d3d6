package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	dpdv1 "github.com/dpd-dev/dpd/proto/dpd/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
)

// Client is a connection to one dpd.
type Client struct {
	conn *grpc.ClientConn
}

// Option configures Dial.
type Option func(*options)

type options struct {
	certFile, keyFile, caFile string
	insecure                  bool
	lazy                      bool
	dialOpts                  []grpc.DialOption
}

// WithTLS uses mTLS for a TCP target: the client's key pair and the CA that
// signed the server's certificate.
func WithTLS(certFile, keyFile, caFile string) Option {
	return func(o *options) { o.certFile, o.keyFile, o.caFile = certFile, keyFile, caFile }
}

// WithInsecure allows a plaintext TCP target (dpd --insecure-tcp).
func WithInsecure() Option { return func(o *options) { o.insecure = true } }

// WithLazy makes Dial return without waiting for the server; the first
// call connects. A Session started this way waits for dpd to appear.
func WithLazy() Option { return func(o *options) { o.lazy = true } }

// WithDialOptions adds raw gRPC dial options.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(o *options) { o.dialOpts = append(o.dialOpts, opts...) }
}

// Dial connects to dpd. target is "unix:///path", a socket path, or
// host:port (TCP, which needs WithTLS or WithInsecure). Unless WithLazy,
// Dial waits until the connection is ready or ctx ends.
func Dial(ctx context.Context, target string, opts ...Option) (*Client, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	grpcTarget, isUnix, err := parseTarget(target)
	if err != nil {
		return nil, err
	}
	creds, err := o.credentials(isUnix)
	if err != nil {
		return nil, err
	}
	dialOpts := append([]grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		// dpd is local and restarts fast: retry sooner than gRPC's default
		// (up to 120 s) so a controller is back within seconds.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 5 * time.Second},
			MinConnectTimeout: 5 * time.Second,
		}),
	}, o.dialOpts...)
	conn, err := grpc.NewClient(grpcTarget, dialOpts...)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", target, err)
	}
	if !o.lazy {
		if err := waitReady(ctx, conn); err != nil {
			_ = conn.Close()
			return nil, fmt.Errorf("connect %s: %w", target, err)
		}
	}
	return &Client{conn: conn}, nil
}

// parseTarget maps a user target to a gRPC one.
func parseTarget(target string) (grpcTarget string, isUnix bool, err error) {
	switch {
	case target == "":
		return "", false, errors.New("empty target")
	case strings.HasPrefix(target, "unix:"):
		return target, true, nil
	case strings.Contains(target, "/") || !strings.Contains(target, ":"):
		abs, err := filepath.Abs(target)
		if err != nil {
			return "", false, fmt.Errorf("socket path: %w", err)
		}
		return "unix://" + abs, true, nil
	}
	return target, false, nil
}

func (o *options) credentials(isUnix bool) (credentials.TransportCredentials, error) {
	hasTLS := o.certFile != "" || o.keyFile != "" || o.caFile != ""
	switch {
	case isUnix && hasTLS:
		return nil, errors.New("TLS is for TCP targets; the Unix socket is guarded by its file mode")
	case isUnix, o.insecure && !hasTLS:
		return insecure.NewCredentials(), nil
	case o.insecure:
		return nil, errors.New("WithTLS and WithInsecure are exclusive")
	case !hasTLS:
		return nil, errors.New("a TCP target needs WithTLS (mTLS) or WithInsecure")
	}
	return clientTLS(o.certFile, o.keyFile, o.caFile)
}

func clientTLS(certFile, keyFile, caFile string) (credentials.TransportCredentials, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("load client key pair: %w", err)
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("read CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", caFile)
	}
	return credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{cert},
		RootCAs:      pool,
		MinVersion:   tls.VersionTLS13,
	}), nil
}

func waitReady(ctx context.Context, conn *grpc.ClientConn) error {
	conn.Connect()
	for {
		st := conn.GetState()
		if st == connectivity.Ready {
			return nil
		}
		if !conn.WaitForStateChange(ctx, st) {
			return fmt.Errorf("%w (last state %s)", ctx.Err(), st)
		}
	}
}

// Inspect is the read-only introspection API.
func (c *Client) Inspect() dpdv1.InspectClient { return dpdv1.NewInspectClient(c.conn) }

// Dataplane is the raw controller API; Session wraps it with replay.
func (c *Client) Dataplane() dpdv1.DataplaneClient { return dpdv1.NewDataplaneClient(c.conn) }

// Conn is the underlying connection (for health or reflection clients).
func (c *Client) Conn() *grpc.ClientConn { return c.conn }

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }
