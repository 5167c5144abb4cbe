// Command coredns is CoreDNS with only the plugins the real node's cluster DNS uses: bind, kubernetes
// (Service and Pod records from the test apiserver), errors, log, health and ready. No forward
// plugin is compiled in, so nothing is ever asked upstream (the tests' network rule).
package main

import (
	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"

	_ "github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"
)

func main() {
	coremain.Run()
}
