/* creds.c: S3 credentials from the environment or a 0600 file.
 *
 * Secrets are wiped (OPENSSL_cleanse) before their memory is freed, and no
 * message built here ever contains one: a bad line is reported by its line
 * number only.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "s3.h"

static void free_secret(char *s)
{
	if (s) {
		OPENSSL_cleanse(s, strlen(s));
		free(s);
	}
}

void s3_credentials_free(struct s3_credentials *c)
{
	if (!c)
		return;
	free(c->access_key);
	free_secret(c->secret_key);
	free_secret(c->session_token);
	memset(c, 0, sizeof(*c));
}

int s3_credentials_set(struct s3_credentials *out, const char *access_key,
		       const char *secret_key, const char *session_token)
{
	struct s3_credentials c = {0};
	c.access_key = strdup(access_key ? access_key : "");
	c.secret_key = strdup(secret_key ? secret_key : "");
	c.session_token =
		session_token && *session_token ? strdup(session_token) : NULL;
	if (!c.access_key || !c.secret_key ||
	    (session_token && *session_token && !c.session_token)) {
		s3_credentials_free(&c);
		return -ENOMEM;
	}
	*out = c;
	return 0;
}

int s3_credentials_from_env(struct s3_credentials *out)
{
	const char *id = getenv("AWS_ACCESS_KEY_ID");
	const char *secret = getenv("AWS_SECRET_ACCESS_KEY");
	if (!id || !*id || !secret || !*secret)
		return -ENOENT;
	return s3_credentials_set(out, id, secret, getenv("AWS_SESSION_TOKEN"));
}

static char *trim(char *s)
{
	while (isspace((unsigned char)*s))
		s++;
	char *e = s + strlen(s);
	while (e > s && isspace((unsigned char)e[-1]))
		*--e = '\0';
	if (e - s >= 2 &&
	    ((*s == '"' && e[-1] == '"') || (*s == '\'' && e[-1] == '\''))) {
		e[-1] = '\0';
		s++;
	}
	return s;
}

static char **slot_for(struct s3_credentials *c, const char *name)
{
	static const char *const ids[] = {"aws_access_key_id", "accessKeyID",
					  "access_key_id", "access_key"};
	static const char *const secrets[] = {
		"aws_secret_access_key", "secretAccessKey", "secret_access_key",
		"secret_key"};
	static const char *const tokens[] = {"aws_session_token",
					     "sessionToken", "session_token"};
	for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++)
		if (strcasecmp(name, ids[i]) == 0)
			return &c->access_key;
	for (size_t i = 0; i < sizeof(secrets) / sizeof(secrets[0]); i++)
		if (strcasecmp(name, secrets[i]) == 0)
			return &c->secret_key;
	for (size_t i = 0; i < sizeof(tokens) / sizeof(tokens[0]); i++)
		if (strcasecmp(name, tokens[i]) == 0)
			return &c->session_token;
	return NULL;
}

int s3_credentials_from_file(const char *path, struct s3_credentials *out,
			     char *why, size_t whylen)
{
	struct s3_credentials c = {0};
	struct stat st;
	char line[4096];
	int rc = 0, lineno = 0;

	/* O_NONBLOCK: a FIFO must not hang us before fstat() refuses it */
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (fd < 0) {
		rc = -errno;
		snprintf(why, whylen, "credentials file '%s': %s", path,
			 strerror(errno));
		return rc;
	}
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		snprintf(why, whylen,
			 "credentials file '%s': not a regular file", path);
		close(fd);
		return -EINVAL;
	}
	if (st.st_mode & 077) {
		snprintf(why, whylen,
			 "credentials file '%s' has mode %04o: it must not be "
			 "accessible by group or others (chmod 600)",
			 path, (unsigned)(st.st_mode & 07777));
		close(fd);
		return -EPERM;
	}
	FILE *f = fdopen(fd, "r");
	if (!f) {
		rc = -errno;
		close(fd);
		snprintf(why, whylen, "credentials file '%s': %s", path,
			 strerror(-rc));
		return rc;
	}
	/* In an AWS ini file only the AWS_PROFILE (or [default]) section
	 * counts; lines before any section header always do. */
	const char *profile = getenv("AWS_PROFILE");
	if (!profile || !*profile)
		profile = "default";
	int in_profile = 1;
	while (rc == 0 && fgets(line, sizeof(line), f)) {
		lineno++;
		char *s = trim(line);
		if (*s == '[') {
			char *end = strchr(s, ']');
			if (end)
				*end = '\0';
			s = trim(s + 1);
			if (strncmp(s, "profile ", 8) == 0)
				s = trim(s + 8);
			in_profile = strcmp(s, profile) == 0;
			continue;
		}
		if (*s == '\0' || *s == '#' || *s == ';' || !in_profile)
			continue;
		if (strncmp(s, "export ", 7) == 0)
			s += 7;
		char *eq = strchr(s, '=');
		char *colon = strchr(s, ':');
		if (!eq || (colon && colon < eq))
			eq = colon;
		if (!eq) {
			snprintf(why, whylen,
				 "credentials file '%s' line %d: expected "
				 "'name = value'",
				 path, lineno);
			rc = -EINVAL;
			break;
		}
		*eq = '\0';
		char **slot = slot_for(&c, trim(s));
		if (!slot)
			continue; /* other settings (region, ...) are not ours
				   */
		char *v = strdup(trim(eq + 1));
		if (!v) {
			rc = -ENOMEM;
			break;
		}
		free_secret(*slot);
		*slot = v;
	}
	OPENSSL_cleanse(line, sizeof(line));
	if (ferror(f) && rc == 0) {
		rc = -EIO;
		snprintf(why, whylen, "credentials file '%s': read error",
			 path);
	}
	fclose(f);
	if (rc == 0 && (!c.access_key || !*c.access_key || !c.secret_key ||
			!*c.secret_key)) {
		snprintf(why, whylen,
			 "credentials file '%s': needs both an access key id "
			 "and a secret access key",
			 path);
		rc = -EINVAL;
	}
	if (rc == 0 && c.session_token && !*c.session_token) {
		free(c.session_token);
		c.session_token = NULL;
	}
	if (rc) {
		s3_credentials_free(&c);
		return rc;
	}
	*out = c;
	return 0;
}
