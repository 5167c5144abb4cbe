// Command minio-setup creates the users and policies the snapshot tests need on a
// running MinIO, through MinIO's admin API (madmin-go, the library mc uses).
//
//	minio-setup -endpoint 127.0.0.1:9000 -access-key root -secret-key secret [-tls -ca ca.pem] \
//	    -policy NAME=FILE ... -user NAME:SECRET:POLICY ...
//
// Each -policy adds a canned policy from a JSON file; each -user adds a user and attaches
// a policy to it. Errors go to stderr and exit 1.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/minio/madmin-go/v3"
)

type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "minio-setup:", err)
		os.Exit(1)
	}
}

func run() error {
	endpoint := flag.String("endpoint", "", "host:port of the MinIO server")
	access := flag.String("access-key", "", "root user")
	secret := flag.String("secret-key", "", "root password")
	useTLS := flag.Bool("tls", false, "https")
	caFile := flag.String("ca", "", "CA bundle (PEM) for -tls")
	var policies, users list
	flag.Var(&policies, "policy", "NAME=FILE: a canned policy (repeatable)")
	flag.Var(&users, "user", "NAME:SECRET:POLICY: a user with that policy (repeatable)")
	flag.Parse()
	if *endpoint == "" || *access == "" || *secret == "" {
		return fmt.Errorf("-endpoint, -access-key and -secret-key are required")
	}
	adm, err := madmin.New(*endpoint, *access, *secret, *useTLS)
	if err != nil {
		return fmt.Errorf("admin client: %w", err)
	}
	if *caFile != "" {
		pem, err := os.ReadFile(*caFile)
		if err != nil {
			return err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("no certificate in %s", *caFile)
		}
		adm.SetCustomTransport(&http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, p := range policies {
		name, file, ok := strings.Cut(p, "=")
		if !ok {
			return fmt.Errorf("-policy %q: want NAME=FILE", p)
		}
		doc, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		if err := adm.AddCannedPolicy(ctx, name, doc); err != nil {
			return fmt.Errorf("adding policy %s: %w", name, err)
		}
	}
	for _, u := range users {
		parts := strings.SplitN(u, ":", 3)
		if len(parts) != 3 {
			return fmt.Errorf("-user %q: want NAME:SECRET:POLICY", u)
		}
		if err := adm.AddUser(ctx, parts[0], parts[1]); err != nil {
			return fmt.Errorf("adding user %s: %w", parts[0], err)
		}
		if _, err := adm.AttachPolicy(ctx, madmin.PolicyAssociationReq{Policies: []string{parts[2]}, User: parts[0]}); err != nil {
			return fmt.Errorf("attaching policy %s to %s: %w", parts[2], parts[0], err)
		}
	}
	return nil
}
