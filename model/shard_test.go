package model

import (
	"fmt"
	"hash/crc32"
	"math"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// TestShardKeyIsStable pins the hash: a task's shard must never change between builds, or a
// node would schedule tasks another node also holds.
func TestShardKeyIsStable(t *testing.T) {
	for _, c := range []struct {
		name  string
		key   uint32
		shard int
	}{
		{"", 0, 0},
		{"a", 0xe8b7be43, 0xe8},
		{"nightly-report", 0x842bd2b0, 132},
		{"task-1", 0xc9dfc1ef, 201},
	} {
		if got := ShardKey(c.name); got != c.key || ShardOf(c.name) != c.shard {
			t.Errorf("ShardKey(%q) = %#x (shard %d), want %#x (shard %d)", c.name, got, ShardOf(c.name), c.key, c.shard)
		}
	}
}

// TestShardsAreEven: names as platforms write them (a prefix and a counter) spread over the
// shards evenly enough that an even share of shards is an even share of tasks.
func TestShardsAreEven(t *testing.T) {
	for _, pattern := range []string{"task-%d", "report.%06d", "tenant-%d:sync", "%d"} {
		const n = 200_000
		var counts [ShardCount]int
		for i := range n {
			counts[ShardOf(fmt.Sprintf(pattern, i))]++
		}
		mean := float64(n) / ShardCount
		chi := 0.0
		lo, hi := n, 0
		for _, c := range counts {
			chi += (float64(c) - mean) * (float64(c) - mean) / mean
			lo, hi = min(lo, c), max(hi, c)
		}
		// 255 degrees of freedom: a uniform spread gives chi² near 255 (sd ≈ 22.6); 400 is
		// six sd above it. The extremes bound what one node's share can differ by.
		if chi > 400 || float64(hi) > 1.1*mean || float64(lo) < 0.9*mean {
			t.Errorf("%q: chi² %.0f, shard sizes %d..%d around a mean of %.0f", pattern, chi, lo, hi, mean)
		}
		t.Logf("%q: chi² %.0f, shard sizes %d..%d (mean %.0f, ±%.1f%%)", pattern, chi, lo, hi, mean,
			100*math.Max(float64(hi)-mean, mean-float64(lo))/mean)
	}
}

func TestShardLeaseName(t *testing.T) {
	for n := range ShardCount {
		got, ok := ParseShardLeaseName(ShardLeaseName(n))
		if !ok || got != n {
			t.Fatalf("ParseShardLeaseName(%q) = %d, %v", ShardLeaseName(n), got, ok)
		}
	}
	for _, bad := range []string{"scheduler", "shard/256", "shard/-01", "shard/7", "shard/007#fence", "shard/0x1"} {
		if n, ok := ParseShardLeaseName(bad); ok {
			t.Errorf("ParseShardLeaseName(%q) = %d, want not a shard lease", bad, n)
		}
	}
}

// TestShardSetModel checks ShardSet against a map of the same operations.
func TestShardSetModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var s ShardSet
		model := map[int]bool{}
		for _, op := range rapid.SliceOf(rapid.IntRange(0, 3)).Draw(t, "ops") {
			n := rapid.IntRange(0, ShardCount-1).Draw(t, "n")
			switch op {
			case 0, 1:
				s.Add(n)
				model[n] = true
			case 2:
				s.Remove(n)
				delete(model, n)
			case 3:
				if s.Has(n) != model[n] {
					t.Fatalf("Has(%d) = %v, want %v", n, s.Has(n), model[n])
				}
			}
		}
		if s.Len() != len(model) {
			t.Fatalf("Len = %d, want %d", s.Len(), len(model))
		}
		list := s.List()
		for i, n := range list {
			if !model[n] || (i > 0 && list[i-1] >= n) {
				t.Fatalf("List = %v, not the ascending members of %v", list, model)
			}
		}
		back, err := ParseShardSet(s.String())
		if err != nil || back != s {
			t.Fatalf("ParseShardSet(%q) = %v, %v; want the set back", s.String(), back.String(), err)
		}
	})
}

func TestShardSetString(t *testing.T) {
	var s ShardSet
	for _, n := range []int{0, 1, 2, 5, 7, 8, 255} {
		s.Add(n)
	}
	if got := s.String(); got != "0-2,5,7-8,255" {
		t.Errorf("String = %q", got)
	}
	all := AllShards()
	if all.String() != "0-255" || all.Len() != ShardCount || all.Has(ShardCount) || all.Has(-1) {
		t.Errorf("AllShards = %q (%d)", all.String(), all.Len())
	}
	for _, bad := range []string{"1-", "-1", "5-3", "256", "01", "a", "1,,2", " 1"} {
		if _, err := ParseShardSet(bad); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("ParseShardSet(%q) = %v, want an error naming it", bad, err)
		}
	}
}

func FuzzParseShardSet(f *testing.F) {
	for _, s := range []string{"", "0-255", "1,3-4", "7-7", "300", "1-0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		s, err := ParseShardSet(text)
		if err != nil {
			return
		}
		// What parses writes back to a form that parses to the same set.
		back, err := ParseShardSet(s.String())
		if err != nil || back != s {
			t.Fatalf("%q: %q does not read back: %v", text, s.String(), err)
		}
	})
}

// TestShardKeyIsCRC32 checks the loop against the library's CRC-32 on names of every length
// up to past the sizes where the library switches to its vector code.
func TestShardKeyIsCRC32(t *testing.T) {
	name := ""
	for n := 0; n < 200; n++ {
		if got, want := ShardKey(name), crc32.ChecksumIEEE([]byte(name)); got != want {
			t.Fatalf("ShardKey of a %d-byte name = %#x, want %#x", n, got, want)
		}
		name += string(rune('a' + n%26))
	}
	if n := testing.AllocsPerRun(100, func() { ShardKey("a-task-name-well-past-thirty-two-bytes") }); n != 0 {
		t.Errorf("ShardKey allocates %v times", n)
	}
}
