package main

import (
	"os"

	"github.com/dpd-dev/dpd/internal/bench"
)

func main() { os.Exit(bench.Main(os.Args[1:], os.Stdout, os.Stderr)) }
