/* units.c: sizes as people write them on command lines ("10G", "512MiB"). */
#include "units.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int units_parse_size(const char *s, uint64_t *out)
{
	static const char suffixes[] = "KMGT";
	char *end;
	if (!s || *s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno)
		return -ERANGE;
	unsigned shift = 0;
	if (*end) {
		const char *p = strchr(suffixes, *end & ~0x20); /* upper case */
		if (!p || !*p)
			return -EINVAL;
		shift = 10 * (unsigned)(p - suffixes + 1);
		end++;
		if (strcmp(end, "") && strcmp(end, "i") && strcmp(end, "iB") &&
		    strcmp(end, "B"))
			return -EINVAL;
	}
	if (shift && v > (UINT64_MAX >> shift))
		return -ERANGE;
	*out = (uint64_t)v << shift;
	return 0;
}
