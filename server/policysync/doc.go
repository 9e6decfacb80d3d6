// Package policysync serves Calico's policy-sync API (felix.PolicySync) to
// per-workload clients such as Dikastes, laid out as Calico lays it out:
// for every credentials file <dir>/creds/<uid>.json a socket at
// <dir>/mount/<uid>/socket, whose clients are that workload
// (k8s/<namespace>/<workload>/eth0). The Processor mirrors the controller's
// messages and streams each client only its workload's subset: its
// endpoint, the policies and profiles it references (before the endpoint
// update; removals after it), the IP sets those reference (split to fit
// gRPC's 4 MiB message limit), service accounts, namespaces and InSync.
package policysync
