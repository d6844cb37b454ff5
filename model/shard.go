package model

import (
	"fmt"
	"hash/crc32"
	"math/bits"
	"strconv"
	"strings"
)

// Shards split the tasks among the nodes that schedule them (docs/scale-out.md). A task's
// shard is a pure function of its name: the top ShardBits bits of ShardKey(name).
//
// 256 shards: enough that any cluster axe is meant for (up to a few dozen nodes) gets an
// even share (3 nodes: 86/85/85, 1.2% apart; 16 nodes: 16 each), few enough that a node
// renews every lease it holds in one statement and a takeover moves at most a few hundred
// rows. The number can grow without touching a task row: what a row would store is the
// 32-bit key, and shard n of 2^b shards is exactly shards n·2^k … n·2^k+2^k−1 of 2^(b+k).
const (
	ShardBits  = 8
	ShardCount = 1 << ShardBits
)

// ShardKey is the stable 32-bit hash of a task name that its shard is read from: the CRC-32
// (IEEE) of the name's bytes. It is the number MySQL's and MariaDB's CRC32(name) give, so
// the database can compute it too. It never changes for a name.
//
// A name with a "/" (which no task's name has: the task a workflow's steps run as,
// WORKFLOW/steps) hashes only what comes before its first "/", so a workflow's steps are
// in the workflow's shard (docs/workflows.md). The database computes the same as
// CRC32(SUBSTRING_INDEX(name, '/', 1)).
func ShardKey(name string) uint32 {
	if i := strings.IndexByte(name, '/'); i >= 0 {
		name = name[:i]
	}
	// The table-driven CRC over the string itself: crc32.ChecksumIEEE would take a copy of
	// the name as []byte on the heap (it escapes into the assembly), an allocation for every
	// task loaded; names are short enough that the byte-at-a-time loop costs no more.
	crc := ^uint32(0)
	for i := 0; i < len(name); i++ {
		crc = crc32.IEEETable[byte(crc)^name[i]] ^ crc>>8
	}
	return ^crc
}

// ShardOfKey is the shard of a key: its top ShardBits bits.
func ShardOfKey(key uint32) int { return int(key >> (32 - ShardBits)) }

// ShardOf is the shard of the task named name.
func ShardOf(name string) int { return ShardOfKey(ShardKey(name)) }

// ShardLeaseName is the name of shard n's lease row: "shard/007".
func ShardLeaseName(n int) string {
	if n >= 0 && n < ShardCount {
		return shardLeaseNames[n] // the renewals and fences of every shard name them often
	}
	return fmt.Sprintf("shard/%03d", n)
}

var shardLeaseNames = func() (out [ShardCount]string) {
	for n := range out {
		out[n] = fmt.Sprintf("shard/%03d", n)
	}
	return out
}()

// ParseShardLeaseName is ShardLeaseName's inverse; ok is false for any other name.
func ParseShardLeaseName(name string) (int, bool) {
	num, found := strings.CutPrefix(name, "shard/")
	if !found || len(num) != 3 {
		return 0, false
	}
	n, err := strconv.Atoi(num)
	if err != nil || n < 0 || n >= ShardCount {
		return 0, false
	}
	return n, true
}

// ShardSet is a set of shards. The zero value is empty; it is a value type, copied by
// assignment.
type ShardSet [ShardCount / 64]uint64

// AllShards returns the set of every shard.
func AllShards() ShardSet {
	var s ShardSet
	for i := range s {
		s[i] = ^uint64(0)
	}
	return s
}

// Has reports whether n is in s; false for a number that is no shard.
func (s ShardSet) Has(n int) bool {
	return n >= 0 && n < ShardCount && s[n/64]&(1<<(n%64)) != 0
}

// Add puts n in s. It panics on a number that is no shard: that is a caller's bug.
func (s *ShardSet) Add(n int) { s[n/64] |= 1 << (n % 64) }

// Remove takes n out of s.
func (s *ShardSet) Remove(n int) {
	if n >= 0 && n < ShardCount {
		s[n/64] &^= 1 << (n % 64)
	}
}

// Len is the number of shards in s.
func (s ShardSet) Len() int {
	n := 0
	for _, w := range s {
		n += bits.OnesCount64(w)
	}
	return n
}

// List returns the shards of s in ascending order.
func (s ShardSet) List() []int {
	out := make([]int, 0, s.Len())
	for i, w := range s {
		for w != 0 {
			b := bits.TrailingZeros64(w)
			out = append(out, i*64+b)
			w &^= 1 << b
		}
	}
	return out
}

// String writes s as ascending ranges, "0-85,170,172-175"; "" when empty.
func (s ShardSet) String() string {
	var b strings.Builder
	list := s.List()
	for i := 0; i < len(list); {
		j := i
		for j+1 < len(list) && list[j+1] == list[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(list[i]))
		if j > i {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(list[j]))
		}
		i = j + 1
	}
	return b.String()
}

// ParseShardSet reads String's form; it names the part it cannot read.
func ParseShardSet(text string) (ShardSet, error) {
	var s ShardSet
	if text == "" {
		return s, nil
	}
	for _, part := range strings.Split(text, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := parseShard(lo)
		if err != nil {
			return ShardSet{}, fmt.Errorf("shard set %q: %q: %w", text, part, err)
		}
		b := a
		if isRange {
			if b, err = parseShard(hi); err != nil {
				return ShardSet{}, fmt.Errorf("shard set %q: %q: %w", text, part, err)
			}
			if b < a {
				return ShardSet{}, fmt.Errorf("shard set %q: %q: the range ends before it starts", text, part)
			}
		}
		for n := a; n <= b; n++ {
			s.Add(n)
		}
	}
	return s, nil
}

func parseShard(text string) (int, error) {
	n, err := strconv.Atoi(text)
	if err != nil || n < 0 || n >= ShardCount || strconv.Itoa(n) != text {
		return 0, fmt.Errorf("not a shard number 0-%d", ShardCount-1)
	}
	return n, nil
}
