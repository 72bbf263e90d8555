/* test_condition.c: a staged volume's VolumeCondition from its daemon's
 * health file (csi_volume_condition(), csi/launcher.c). The health lines
 * are cache/health.c's format. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "../../csi/launcher.h"

#define NOW 1800000000

static const char *health(long long updated, const char *s3,
			  const char *s3_error, unsigned dirty,
			  unsigned long long oldest)
{
	static char buf[512];
	snprintf(buf, sizeof(buf),
		 "updated=%lld\ns3=%s\ns3_error=%s\ndirty_inodes=%u\n"
		 "oldest_dirty_s=%llu\ncapacity=1073741824\n",
		 updated, s3, s3_error, dirty, oldest);
	return buf;
}

static void test_a_fresh_healthy_report_is_healthy(void **state)
{
	(void)state;
	char msg[256];
	csi_volume_condition(1, health(NOW - 5, "ok", "", 3, 40), NOW, msg,
			     sizeof(msg));
	assert_string_equal(msg, "");
	/* a daemon that has not written its first report yet */
	csi_volume_condition(1, NULL, NOW, msg, sizeof(msg));
	assert_string_equal(msg, "");
}

static void test_a_dead_daemon_is_abnormal(void **state)
{
	(void)state;
	char msg[256];
	csi_volume_condition(0, health(NOW, "ok", "", 0, 0), NOW, msg,
			     sizeof(msg));
	assert_non_null(strstr(msg, "not running"));
}

static void test_a_daemon_that_stopped_reporting_is_stuck(void **state)
{
	(void)state;
	char msg[256];
	csi_volume_condition(1,
			     health(NOW - CSI_HEALTH_STALE_S, "ok", "", 0, 0),
			     NOW, msg, sizeof(msg));
	assert_string_equal(msg, "");
	csi_volume_condition(
		1, health(NOW - CSI_HEALTH_STALE_S - 1, "ok", "", 0, 0), NOW,
		msg, sizeof(msg));
	assert_non_null(strstr(msg, "has not reported for 121 s"));
}

static void test_failing_s3_is_abnormal_and_says_why(void **state)
{
	(void)state;
	char msg[256];
	csi_volume_condition(1, health(NOW, "error", "ECONNREFUSED", 1, 3), NOW,
			     msg, sizeof(msg));
	assert_string_equal(msg, "S3 is failing: ECONNREFUSED");
}

static void test_uploads_waiting_too_long_are_stuck(void **state)
{
	(void)state;
	char msg[256];
	csi_volume_condition(1, health(NOW, "ok", "", 7, CSI_DIRTY_STUCK_S),
			     NOW, msg, sizeof(msg));
	assert_string_equal(msg, "");
	csi_volume_condition(1, health(NOW, "ok", "", 7, CSI_DIRTY_STUCK_S + 1),
			     NOW, msg, sizeof(msg));
	assert_non_null(strstr(msg, "uploads are stuck"));
	assert_non_null(strstr(msg, "601 s"));
	assert_non_null(strstr(msg, "7 files pending"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_a_fresh_healthy_report_is_healthy),
		cmocka_unit_test(test_a_dead_daemon_is_abnormal),
		cmocka_unit_test(test_a_daemon_that_stopped_reporting_is_stuck),
		cmocka_unit_test(test_failing_s3_is_abnormal_and_says_why),
		cmocka_unit_test(test_uploads_waiting_too_long_are_stuck),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
