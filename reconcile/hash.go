package reconcile

import (
	"crypto/md5"
	"encoding/binary"
	"math/bits"
)

// Row hashes. Each dialect hashes a row's canonical text (canon.go) with a
// function its server has built in, and cdcd computes the same function
// over the same text from the Iceberg row:
//
//	PostgreSQL  hashtextextended(text COLLATE "C", 0): Bob Jenkins'
//	            lookup3 as PostgreSQL's hash_bytes_extended runs it on a
//	            little-endian machine (the server's byte order does not
//	            matter: its unaligned path reads bytes little-endian, and
//	            its aligned path does the same on x86 and arm64)
//	MySQL       the first 64 bits of MD5 of the text, big-endian
//
// A range's sum is the count and the sum of its rows' hashes modulo 2^64,
// so the order rows are read in does not matter.

// pgHash is PostgreSQL's hash_bytes_extended(k, len(k), seed) on a
// little-endian machine, as hashtextextended returns it (a bigint: the
// bits of the uint64).
func pgHash(k []byte, seed uint64) uint64 { return seeded(uint32(len(k)), seed).bytes(k) }

// lookup is lookup3's state: what the key's length and the seed make of
// it before the key's bytes are added, so a caller hashing many keys of
// one length with one seed mixes the seed in once.
type lookup struct{ a, b, c uint32 }

// seeded is the state for a key of n bytes and seed.
func seeded(n uint32, seed uint64) lookup {
	a := 0x9e3779b9 + n + 3923095
	b, c := a, a
	if seed != 0 {
		a += uint32(seed >> 32)
		b += uint32(seed)
		a, b, c = mix(a, b, c)
	}
	return lookup{a, b, c}
}

// u32 is hash_bytes_uint32_extended's end from the state of a 4-byte
// key: hashU32(k, seed) is seeded(4, seed).u32(k).
func (s lookup) u32(k uint32) uint64 {
	_, b, c := final(s.a+k, s.b, s.c)
	return uint64(b)<<32 | uint64(c)
}

// bytes is hash_bytes_extended's end from the state of a key of
// len(k) bytes.
func (s lookup) bytes(k []byte) uint64 {
	a, b, c := s.a, s.b, s.c
	for len(k) >= 12 {
		a += binary.LittleEndian.Uint32(k)
		b += binary.LittleEndian.Uint32(k[4:])
		c += binary.LittleEndian.Uint32(k[8:])
		a, b, c = mix(a, b, c)
		k = k[12:]
	}
	// The last 11 bytes: a takes bytes 0-3, b 4-7, c 8-10 shifted past
	// its lowest byte.
	switch len(k) {
	case 11:
		c += uint32(k[10]) << 24
		fallthrough
	case 10:
		c += uint32(k[9]) << 16
		fallthrough
	case 9:
		c += uint32(k[8]) << 8
		fallthrough
	case 8:
		b += binary.LittleEndian.Uint32(k[4:])
		a += binary.LittleEndian.Uint32(k)
	case 7:
		b += uint32(k[6]) << 16
		fallthrough
	case 6:
		b += uint32(k[5]) << 8
		fallthrough
	case 5:
		b += uint32(k[4])
		fallthrough
	case 4:
		a += binary.LittleEndian.Uint32(k)
	case 3:
		a += uint32(k[2]) << 16
		fallthrough
	case 2:
		a += uint32(k[1]) << 8
		fallthrough
	case 1:
		a += uint32(k[0])
	}
	a, b, c = final(a, b, c)
	return uint64(b)<<32 | uint64(c)
}

func mix(a, b, c uint32) (uint32, uint32, uint32) {
	a -= c
	a ^= bits.RotateLeft32(c, 4)
	c += b
	b -= a
	b ^= bits.RotateLeft32(a, 6)
	a += c
	c -= b
	c ^= bits.RotateLeft32(b, 8)
	b += a
	a -= c
	a ^= bits.RotateLeft32(c, 16)
	c += b
	b -= a
	b ^= bits.RotateLeft32(a, 19)
	a += c
	c -= b
	c ^= bits.RotateLeft32(b, 4)
	b += a
	return a, b, c
}

func final(a, b, c uint32) (uint32, uint32, uint32) {
	c ^= b
	c -= bits.RotateLeft32(b, 14)
	a ^= c
	a -= bits.RotateLeft32(c, 11)
	b ^= a
	b -= bits.RotateLeft32(a, 25)
	c ^= b
	c -= bits.RotateLeft32(b, 16)
	a ^= c
	a -= bits.RotateLeft32(c, 4)
	b ^= a
	b -= bits.RotateLeft32(a, 14)
	c ^= b
	c -= bits.RotateLeft32(b, 24)
	return a, b, c
}

// md5Hash is the first 64 bits of MD5(k), big-endian: MySQL's
// CAST(CONV(LEFT(MD5(k), 16), 16, 10) AS UNSIGNED).
func md5Hash(k []byte) uint64 {
	s := md5.Sum(k)
	return binary.BigEndian.Uint64(s[:8])
}
