/*
 * jhash (include/linux/jhash.h) and hashtab.c's htab_map_hash, as pybpf/emulated/maps/jhash.py
 * computes them: for the shared maps (_shm_maps.c) and the emulated hash map's C core
 * (_hashtab.c).
 */
#ifndef PYBPF_JHASH_H
#define PYBPF_JHASH_H

#include <stdint.h>

#define JHASH_INITVAL 0xdeadbeefu
static inline uint32_t rol32(uint32_t w, unsigned s) { return (w << s) | (w >> (32 - s)); }
#define __jhash_mix(a, b, c)                                                              \
	{                                                                                 \
		a -= c; a ^= rol32(c, 4); c += b;                                         \
		b -= a; b ^= rol32(a, 6); a += c;                                         \
		c -= b; c ^= rol32(b, 8); b += a;                                         \
		a -= c; a ^= rol32(c, 16); c += b;                                        \
		b -= a; b ^= rol32(a, 19); a += c;                                        \
		c -= b; c ^= rol32(b, 4); b += a;                                         \
	}
#define __jhash_final(a, b, c)                                                            \
	{                                                                                 \
		c ^= b; c -= rol32(b, 14);                                                \
		a ^= c; a -= rol32(c, 11);                                                \
		b ^= a; b -= rol32(a, 25);                                                \
		c ^= b; c -= rol32(b, 16);                                                \
		a ^= c; a -= rol32(c, 4);                                                 \
		b ^= a; b -= rol32(a, 14);                                                \
		c ^= b; c -= rol32(b, 24);                                                \
	}

static inline uint32_t get_le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint32_t jhash(const uint8_t *k, uint32_t length, uint32_t initval)
{
	uint32_t a, b, c;
	a = b = c = JHASH_INITVAL + length + initval;
	while (length > 12) {
		a += get_le32(k);
		b += get_le32(k + 4);
		c += get_le32(k + 8);
		__jhash_mix(a, b, c);
		length -= 12;
		k += 12;
	}
	switch (length) { /* the last 1..12 bytes, byte j into word j / 4 at bit 8 * (j % 4) */
	case 12: c += (uint32_t)k[11] << 24; /* fall through */
	case 11: c += (uint32_t)k[10] << 16; /* fall through */
	case 10: c += (uint32_t)k[9] << 8;   /* fall through */
	case 9:  c += k[8];                  /* fall through */
	case 8:  b += (uint32_t)k[7] << 24;  /* fall through */
	case 7:  b += (uint32_t)k[6] << 16;  /* fall through */
	case 6:  b += (uint32_t)k[5] << 8;   /* fall through */
	case 5:  b += k[4];                  /* fall through */
	case 4:  a += (uint32_t)k[3] << 24;  /* fall through */
	case 3:  a += (uint32_t)k[2] << 16;  /* fall through */
	case 2:  a += (uint32_t)k[1] << 8;   /* fall through */
	case 1:  a += k[0];
		__jhash_final(a, b, c);
		break;
	case 0:
		break;
	}
	return c;
}

static inline uint32_t jhash2(const uint8_t *k, uint32_t words, uint32_t initval)
{
	uint32_t a, b, c;
	a = b = c = JHASH_INITVAL + (words << 2) + initval;
	while (words > 3) {
		a += get_le32(k);
		b += get_le32(k + 4);
		c += get_le32(k + 8);
		__jhash_mix(a, b, c);
		words -= 3;
		k += 12;
	}
	switch (words) {
	case 3: c += get_le32(k + 8); /* fall through */
	case 2: b += get_le32(k + 4); /* fall through */
	case 1: a += get_le32(k);
		__jhash_final(a, b, c);
		break;
	case 0:
		break;
	}
	return c;
}

/* hashtab.c's htab_map_hash */
static inline uint32_t htab_map_hash(const uint8_t *key, uint32_t key_size, uint32_t hashrnd)
{
	if ((key_size & 3) == 0)
		return jhash2(key, key_size / 4, hashrnd);
	return jhash(key, key_size, hashrnd);
}

#endif
