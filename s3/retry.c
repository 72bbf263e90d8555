/* retry.c: which S3 failures are retried, and how long to wait between tries.
 *
 * Retried: transport failures (refused, reset, timeout), every 5xx except
 * 501 NotImplemented, 429 and SlowDown, and the 4xx codes that S3 documents
 * as transient: RequestTimeout, RequestTimeTooSkewed (the clock is fixed
 * before the retry), InternalError, OperationAborted and
 * ExpiredToken/TokenRefreshRequired (new credentials may be loaded).
 * Never retried: other 4xx, which the same request would get again.
 */
#include "retry.h"

#include <string.h>

static const char *const retryable_codes[] = {
	"RequestTimeout",     "RequestTimeTooSkewed",
	"InternalError",      "SlowDown",
	"ServiceUnavailable", "OperationAborted",
	"ExpiredToken",	      "TokenRefreshRequired",
	"Throttling",	      "ThrottlingException",
	"RequestThrottled",
};

int retry_should_retry(enum retry_transport t, int http_status,
		       const char *code)
{
	switch (t) {
	case RETRY_T_CONNECT:
	case RETRY_T_RESET:
	case RETRY_T_TIMEOUT:
		return 1;
	case RETRY_T_FATAL:
		return 0;
	case RETRY_T_NONE:
		break;
	}
	if (code && *code)
		for (size_t i = 0;
		     i < sizeof(retryable_codes) / sizeof(retryable_codes[0]);
		     i++)
			if (strcmp(code, retryable_codes[i]) == 0)
				return 1;
	if (http_status == 501)
		return 0;
	return http_status >= 500 || http_status == 429;
}

unsigned retry_backoff_ms(unsigned attempt, unsigned base_ms, unsigned max_ms,
			  uint64_t rnd)
{
	uint64_t ceiling = base_ms;
	for (unsigned i = 1; i < attempt && ceiling < max_ms; i++)
		ceiling *= 2;
	if (ceiling > max_ms)
		ceiling = max_ms;
	return (unsigned)(rnd % (ceiling + 1));
}
