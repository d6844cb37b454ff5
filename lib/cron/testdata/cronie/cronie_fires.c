/*
 * cronie_fires computes reference fire times with cronie's own code, for the unix-dialect and
 * crontab-import test data of axe. It is compiled together with cronie's sources (see
 * README.md): cron.c is included whole, so that the function crond calls every minute,
 * find_jobs, decides whether a line fires; load_user (user.c) and load_entry (entry.c) read
 * the crontab, environment lines included. The daemon loop is replayed minute by minute in
 * the daemon's zone (its normal path, one minute at a time, which is all crond does outside
 * a clock jump or a change of the daemon zone's offset).
 *
 * Input (stdin), one case a line:
 *     DAEMON_ZONE <TAB> START <TAB> ENV <TAB> SCHEDULE
 * ENV is "-" or environment lines joined by " ; " (written above the job line, e.g.
 * "CRON_TZ=Asia/Tokyo"); SCHEDULE is the five fields or the @descriptor. START is an RFC 3339
 * UTC instant. Output: the input line, a tab, and the next FIRES fire times after START
 * (real instants, RFC 3339 UTC, comma separated), "none" when none comes within HORIZON, or
 * "refused" when cronie does not load the line.
 */
#define main crond_main
#include "cron.c"
#undef main

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { FIRES = 5 };
static const long HORIZON = 9L * 366 * 24 * 3600; /* cronie's own bound is 8 years */

static int fired;

/* job_add replaces job.c's: crond queues the job; here it is only counted. */
void job_add(entry *e, user *u) {
	(void)e;
	(void)u;
	fired = 1;
}

int job_runqueue(void) { return 0; }

static time_t parse_utc(const char *s) {
	struct tm tm;
	memset(&tm, 0, sizeof tm);
	if (strptime(s, "%Y-%m-%dT%H:%M:%SZ", &tm) == NULL) {
		fprintf(stderr, "bad start %s\n", s);
		exit(2);
	}
	return timegm(&tm);
}

static void one(char *zone, char *start, char *env, char *sched) {
	char text[4096], path[] = "/tmp/cronie_fires_XXXXXX";
	int n = 0;
	if (strcmp(env, "-") != 0) {
		char *save, *tok;
		char copy[2048];
		snprintf(copy, sizeof copy, "%s", env);
		for (tok = strtok_r(copy, ";", &save); tok; tok = strtok_r(NULL, ";", &save)) {
			while (*tok == ' ') tok++;
			char *end = tok + strlen(tok);
			while (end > tok && end[-1] == ' ') *--end = '\0';
			n += snprintf(text + n, sizeof text - n, "%s\n", tok);
		}
	}
	snprintf(text + n, sizeof text - n, "%s true\n", sched);

	int fd = mkstemp(path);
	if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text)) {
		perror("temp crontab");
		exit(2);
	}
	lseek(fd, 0, SEEK_SET);
	struct passwd pw;
	memset(&pw, 0, sizeof pw);
	pw.pw_name = "nobody";
	pw.pw_passwd = "";
	pw.pw_dir = "/";
	pw.pw_uid = 65534;
	/* the daemon's zone is the process's TZ, as for crond */
	setenv("TZ", zone, 1);
	tzset();
	user *u = load_user(fd, &pw, "nobody", path, path);
	unlink(path);
	printf("%s\t%s\t%s\t%s\t", zone, start, env, sched);
	if (u == NULL || u->crontab == NULL) {
		printf("refused\n");
		return;
	}
	cron_db db = {u, u, 0};
	u->next = u->prev = NULL;

	time_t t0 = parse_utc(start);
	time_t t = (t0 / 60 + 1) * 60; /* the first whole minute after START */
	int got = 0;
	for (; got < FIRES && t - t0 <= HORIZON; t += 60) {
		struct tm lt;
		setenv("TZ", zone, 1);
		tzset();
		localtime_r(&t, &lt);
		GMToff = lt.tm_gmtoff;
		int vtime = (int)((t + GMToff) / 60);
		fired = 0;
		find_jobs(vtime, &db, TRUE, TRUE, GMToff);
		if (fired) {
			char buf[32];
			struct tm ut;
			gmtime_r(&t, &ut);
			strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &ut);
			printf("%s%s", got ? "," : "", buf);
			got++;
		}
	}
	printf("%s\n", got ? "" : "none");
	fflush(stdout);
}

int main(void) {
	char line[4096];
	while (fgets(line, sizeof line, stdin)) {
		line[strcspn(line, "\n")] = '\0';
		if (line[0] == '\0' || line[0] == '#')
			continue;
		char *f[4];
		char *p = line;
		for (int i = 0; i < 4; i++) {
			f[i] = p;
			char *tab = i < 3 ? strchr(p, '\t') : NULL;
			if (i < 3) {
				if (!tab) {
					fprintf(stderr, "want 4 tab-separated columns: %s\n", line);
					return 2;
				}
				*tab = '\0';
				p = tab + 1;
			}
		}
		one(f[0], f[1], f[2], f[3]);
	}
	return 0;
}
