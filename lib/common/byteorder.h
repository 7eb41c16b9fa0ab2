/* Byte order helpers for on-wire and on-disk formats: one set for the whole
 * tree. Unaligned access is fine (byte by byte); compilers turn these into
 * single loads and stores. */
#ifndef ZL_BYTEORDER_H
#define ZL_BYTEORDER_H

#include <stdint.h>

static inline void zl_put_le16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static inline void zl_put_le32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline void zl_put_le64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint16_t zl_get_le16(const uint8_t *p)
{
	return (uint16_t)(p[0] | (p[1] << 8));
}

static inline uint32_t zl_get_le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t zl_get_le64(const uint8_t *p)
{
	return (uint64_t)zl_get_le32(p) | (uint64_t)zl_get_le32(p + 4) << 32;
}

static inline void zl_put_be16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static inline uint16_t zl_get_be16(const uint8_t *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

static inline void zl_put_be32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (24 - 8 * i));
}

static inline void zl_put_be64(uint8_t *p, uint64_t v)
{
	zl_put_be32(p, (uint32_t)(v >> 32));
	zl_put_be32(p + 4, (uint32_t)v);
}

static inline uint32_t zl_get_be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static inline uint64_t zl_get_be64(const uint8_t *p)
{
	return (uint64_t)zl_get_be32(p) << 32 | zl_get_be32(p + 4);
}

#endif
