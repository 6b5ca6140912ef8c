package cluster

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
)

// AllocationID returns the n-th allocation id of a cluster. OpenSearch's
// ids are random version-4 UUIDs in unpadded URL-safe base64
// (AllocationId.newInitializing → UUIDs.randomBase64UUID: 16 bytes, 22
// characters); ours have the same shape, but their 16 bytes are the first
// of SHA-256(cluster uuid, n), so every node applying the same log names a
// copy alike. n comes from State.NextAllocation, which only grows, so ids
// never repeat within a cluster (Validate checks that they are unique).
func AllocationID(clusterUUID string, n uint64) string {
	h := sha256.New()
	h.Write([]byte("allocation/"))
	h.Write([]byte(clusterUUID))
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], n)
	h.Write(b[:])
	sum := h.Sum(nil)[:16]
	sum[6] = sum[6]&0x0f | 0x40 // version 4, as RandomBasedUUIDGenerator sets it
	sum[8] = sum[8]&0x3f | 0x80 // IETF variant
	return base64.RawURLEncoding.EncodeToString(sum)
}
