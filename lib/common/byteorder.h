/* Byte order helpers for on-wire and on-disk formats: one set for the whole
 * tree. Unaligned access is fine: each is one unaligned load or store (a
 * memcpy of the value) plus, where the host's order differs, a byte swap. */
#ifndef ZL_BYTEORDER_H
#define ZL_BYTEORDER_H

#include <stdint.h>
#include <string.h>

#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define ZL_LE16(v) ((uint16_t)(v))
#define ZL_LE32(v) ((uint32_t)(v))
#define ZL_LE64(v) ((uint64_t)(v))
#define ZL_BE16(v) __builtin_bswap16(v)
#define ZL_BE32(v) __builtin_bswap32(v)
#define ZL_BE64(v) __builtin_bswap64(v)
#elif __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define ZL_LE16(v) __builtin_bswap16(v)
#define ZL_LE32(v) __builtin_bswap32(v)
#define ZL_LE64(v) __builtin_bswap64(v)
#define ZL_BE16(v) ((uint16_t)(v))
#define ZL_BE32(v) ((uint32_t)(v))
#define ZL_BE64(v) ((uint64_t)(v))
#else
#error "unknown byte order"
#endif

static inline void zl_put_le16(uint8_t *p, uint16_t v)
{
	v = ZL_LE16(v);
	memcpy(p, &v, sizeof(v));
}

static inline void zl_put_le32(uint8_t *p, uint32_t v)
{
	v = ZL_LE32(v);
	memcpy(p, &v, sizeof(v));
}

static inline void zl_put_le64(uint8_t *p, uint64_t v)
{
	v = ZL_LE64(v);
	memcpy(p, &v, sizeof(v));
}

static inline uint16_t zl_get_le16(const uint8_t *p)
{
	uint16_t v;

	memcpy(&v, p, sizeof(v));
	return ZL_LE16(v);
}

static inline uint32_t zl_get_le32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, sizeof(v));
	return ZL_LE32(v);
}

static inline uint64_t zl_get_le64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, sizeof(v));
	return ZL_LE64(v);
}

static inline void zl_put_be16(uint8_t *p, uint16_t v)
{
	v = ZL_BE16(v);
	memcpy(p, &v, sizeof(v));
}

static inline uint16_t zl_get_be16(const uint8_t *p)
{
	uint16_t v;

	memcpy(&v, p, sizeof(v));
	return ZL_BE16(v);
}

static inline void zl_put_be32(uint8_t *p, uint32_t v)
{
	v = ZL_BE32(v);
	memcpy(p, &v, sizeof(v));
}

static inline void zl_put_be64(uint8_t *p, uint64_t v)
{
	v = ZL_BE64(v);
	memcpy(p, &v, sizeof(v));
}

static inline uint32_t zl_get_be32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, sizeof(v));
	return ZL_BE32(v);
}

static inline uint64_t zl_get_be64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, sizeof(v));
	return ZL_BE64(v);
}

#endif
