package daemon

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/axe-sched/axe/persist"
)

// The nodes of a sharded cluster sign the calls they make of each other (admin's peer
// signatures, docs/security.md "Calls between nodes") with a key derived from one secret
// they all share. Every node already shares the database and nothing else for sure (token
// files may differ, a cluster may have none), so the secret lives there: the first node to
// start writes 32 random bytes, and every node reads them. Whoever reads the database can
// read it, and whoever can write the database controls the cluster anyway.
//
// The secret is the holder of a lease row that no node renews, taken once for a century:
// the lease table's take is the compare-and-swap that lets exactly one of several nodes
// starting at once write it, and it needs no schema of its own.

// peerSecretLease names the lease row that holds the cluster's peer secret.
const peerSecretLease = "cluster/peer-secret"

// peerSecretTTL keeps the row held, so that no take replaces it.
const peerSecretTTL = 100 * 365 * 24 * time.Hour

// peerSecret returns the cluster's peer secret from store, writing one first when the
// cluster has none. To change it, delete the row (and its "#fence" row) and restart every
// node.
func peerSecret(ctx context.Context, store persist.LeaseStore) ([]byte, error) {
	for attempt := 0; attempt < 5; attempt++ {
		st, err := store.LeaseState(ctx, peerSecretLease)
		if err != nil {
			return nil, fmt.Errorf("cannot read the cluster's peer secret: %w", err)
		}
		if st.Held {
			return []byte(st.Holder), nil
		}
		var b [32]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, fmt.Errorf("cannot make the cluster's peer secret: %w", err)
		}
		st, _, err = store.TakeLease(ctx, peerSecretLease, hex.EncodeToString(b[:]), peerSecretTTL)
		if err != nil {
			return nil, fmt.Errorf("cannot write the cluster's peer secret: %w", err)
		}
		if st.Held {
			// Ours, or another node's that took the row first.
			return []byte(st.Holder), nil
		}
	}
	return nil, fmt.Errorf("cannot read the cluster's peer secret: the row %q is never held", peerSecretLease)
}
