package main

import (
	"os"

	"github.com/dpd-dev/dpd/client/ctl"
)

func main() { os.Exit(ctl.Main(os.Args[1:], os.Stdout, os.Stderr)) }
