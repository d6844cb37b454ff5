-- axe upgrade fixture: schema version 22, written by TestWriteUpgradeFixture
-- (persist/testdata/upgrade/README.md). One statement per line-ending ';'.

CREATE TABLE `backfill` (
  `id` bigint(20) NOT NULL AUTO_INCREMENT,
  `task_id` bigint(20) NOT NULL,
  `task_name` varchar(255) NOT NULL,
  `from_ms` bigint(20) NOT NULL,
  `to_ms` bigint(20) NOT NULL,
  `parallel` int(11) NOT NULL,
  `cron` varchar(255) NOT NULL,
  `cron_dialect` varchar(32) NOT NULL,
  `timezone` varchar(64) NOT NULL,
  `total` bigint(20) NOT NULL,
  `next_fire` bigint(20) NOT NULL,
  `low_fire` bigint(20) NOT NULL,
  `started` bigint(20) NOT NULL,
  `skipped` bigint(20) NOT NULL,
  `succeeded` bigint(20) NOT NULL,
  `failed` bigint(20) NOT NULL,
  `status` varchar(32) NOT NULL,
  `actor` varchar(255) NOT NULL,
  `created_at` bigint(20) NOT NULL,
  `updated_at` bigint(20) NOT NULL,
  `ended_at` bigint(20) NOT NULL,
  `note` text NOT NULL,
  PRIMARY KEY (`id`),
  KEY `idx_backfill_task` (`task_id`,`id`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE `concurrency_limit` (
  `kind` varchar(32) NOT NULL,
  `name` varchar(255) NOT NULL,
  `max_runs` int(11) NOT NULL,
  `updated_at` bigint(20) NOT NULL,
  `slot_seq` bigint(20) NOT NULL DEFAULT 0,
  PRIMARY KEY (`kind`,`name`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE `concurrency_slot` (
  `ticket` varchar(128) NOT NULL,
  `kind` varchar(32) NOT NULL,
  `name` varchar(255) NOT NULL,
  `shard` int(11) NOT NULL,
  `epoch` bigint(20) NOT NULL,
  `taken_at` bigint(20) NOT NULL,
  PRIMARY KEY (`ticket`,`kind`),
  KEY `idx_concurrency_slot_limit` (`kind`,`name`),
  KEY `idx_concurrency_slot_shard` (`shard`,`epoch`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE `concurrency_wait` (
  `kind` varchar(32) NOT NULL,
  `name` varchar(255) NOT NULL,
  `node` varchar(255) NOT NULL,
  `priority` int(11) NOT NULL,
  `fire_at` bigint(20) NOT NULL,
  `since` bigint(20) NOT NULL,
  `seen_at` bigint(20) NOT NULL,
  PRIMARY KEY (`kind`,`name`,`node`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE `executor` (
  `app` varchar(255) NOT NULL,
  `address` varchar(255) NOT NULL,
  `protocol` varchar(32) NOT NULL,
  `handlers` text NOT NULL,
  `registered_at` bigint(20) NOT NULL,
  `last_heartbeat` bigint(20) NOT NULL,
  `status` varchar(32) NOT NULL,
  `dispatch_key` varchar(128) NOT NULL DEFAULT '',
  `incarnation` varchar(64) NOT NULL DEFAULT '',
  PRIMARY KEY (`app`,`address`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE `lease` (
  `name` varchar(255) NOT NULL,
  `holder` varchar(255) NOT NULL,
  `epoch` bigint(20) NOT NULL,
  `expiry` datetime(6) NOT NULL DEFAULT '1970-01-01 00:00:00.000000',
  PRIMARY KEY (`name`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE `minute_stats` (
  `minute` bigint(20) NOT NULL,
  `node` varchar(255) NOT NULL,
  `fires` bigint(20) NOT NULL,
  `failures` bigint(20) NOT NULL,
  `late_sum_ms` bigint(20) NOT NULL,
  `late_count` bigint(20) NOT NULL,
  PRIMARY KEY (`minute`,`node`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE `nodes` (
  `id` varchar(255) NOT NULL,
  `advertise` varchar(255) NOT NULL,
  `role` varchar(32) NOT NULL,
  `instance` varchar(64) NOT NULL,
  `started_at` datetime(6) NOT NULL,
  `last_seen` datetime(6) NOT NULL,
  PRIMARY KEY (`id`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE `rate_demand` (
  `downstream` varchar(255) NOT NULL,
  `node` varchar(255) NOT NULL,
  `demand` double NOT NULL,
  `seen_at` bigint(20) NOT NULL,
  PRIMARY KEY (`downstream`,`node`),
  KEY `idx_rate_demand_node` (`node`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE `schema_migrations` (
  `version` int(11) NOT NULL,
  `name` varchar(255) NOT NULL,
  PRIMARY KEY (`version`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE `task_action` (
  `id` bigint(20) NOT NULL AUTO_INCREMENT,
  `task_id` bigint(20) NOT NULL,
  `task_name` varchar(255) NOT NULL,
  `ticket` varchar(128) NOT NULL,
  `action` varchar(32) NOT NULL,
  `from_state` varchar(32) NOT NULL,
  `to_state` varchar(32) NOT NULL,
  `actor` varchar(255) NOT NULL,
  `at` bigint(20) NOT NULL,
  `detail` text NOT NULL,
  PRIMARY KEY (`id`),
  KEY `idx_task_action_task` (`task_id`,`id`)
) ENGINE=InnoDB AUTO_INCREMENT=8 DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE `task_def` (
  `id` bigint(20) NOT NULL AUTO_INCREMENT,
  `name` varchar(255) NOT NULL,
  `grp` varchar(255) NOT NULL,
  `trigger_type` varchar(32) NOT NULL,
  `cron` varchar(255) NOT NULL,
  `delay_ms` bigint(20) NOT NULL,
  `depends_on` text NOT NULL,
  `depends_mode` varchar(32) NOT NULL,
  `timezone` varchar(64) NOT NULL,
  `timeout_sec` int(11) NOT NULL,
  `retry_count` int(11) NOT NULL,
  `retry_interval_sec` int(11) NOT NULL,
  `priority` int(11) NOT NULL,
  `callback` text NOT NULL,
  `params` mediumtext NOT NULL,
  `misfire_policy` varchar(32) NOT NULL,
  `paused` tinyint(4) NOT NULL,
  `created_at` bigint(20) NOT NULL,
  `updated_at` bigint(20) NOT NULL,
  `on_lost` varchar(32) NOT NULL DEFAULT '',
  `cron_dialect` varchar(32) NOT NULL DEFAULT 'unix',
  `retain_history_ms` bigint(20) NOT NULL DEFAULT 0,
  `retain_finished_ms` bigint(20) NOT NULL DEFAULT 0,
  `sensitive_params` varchar(4096) NOT NULL DEFAULT '',
  `pause_after_failures` int(11) NOT NULL DEFAULT 0,
  `jitter_sec` int(11) NOT NULL DEFAULT 0,
  `concurrency_key` varchar(255) NOT NULL DEFAULT '',
  `overlap_policy` varchar(32) NOT NULL DEFAULT 'buffer_one',
  `catchup_window_sec` int(11) NOT NULL DEFAULT 0,
  `rate_key` varchar(255) NOT NULL DEFAULT '',
  PRIMARY KEY (`id`),
  UNIQUE KEY `uk_task_def_name` (`name`),
  KEY `idx_task_def_grp` (`grp`,`id`)
) ENGINE=InnoDB AUTO_INCREMENT=10 DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE `task_dep` (
  `task_id` bigint(20) NOT NULL,
  `upstream_name` varchar(255) NOT NULL,
  PRIMARY KEY (`task_id`,`upstream_name`),
  KEY `idx_task_dep_upstream` (`upstream_name`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE `task_run` (
  `ticket` varchar(128) NOT NULL,
  `task_id` bigint(20) NOT NULL,
  `task_name` varchar(255) NOT NULL,
  `kind` varchar(32) NOT NULL,
  `attempt` int(11) NOT NULL,
  `scheduled_at` bigint(20) NOT NULL,
  `dispatched_at` bigint(20) NOT NULL,
  `executor` varchar(255) NOT NULL,
  `ended_at` bigint(20) NOT NULL,
  `result` varchar(32) NOT NULL,
  `error` text NOT NULL,
  `duration_ms` bigint(20) NOT NULL,
  `output` text NOT NULL,
  `detail` text NOT NULL,
  `open_manual` bigint(20) GENERATED ALWAYS AS (if(`result` = 'running' and `kind` = 'manual',`scheduled_at`,NULL)) STORED,
  `params` mediumtext DEFAULT NULL,
  PRIMARY KEY (`ticket`),
  KEY `idx_task_run_task` (`task_id`,`scheduled_at`),
  KEY `idx_task_run_open_sched` (`open_manual`,`scheduled_at`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE `task_runtime` (
  `task_id` bigint(20) NOT NULL,
  `state` varchar(32) NOT NULL,
  `current_ticket` varchar(128) NOT NULL,
  `attempt` int(11) NOT NULL,
  `next_trigger_time` bigint(20) NOT NULL,
  `last_trigger_time` bigint(20) NOT NULL,
  `last_end_time` bigint(20) NOT NULL,
  `last_executor` varchar(255) NOT NULL,
  `success_count` bigint(20) NOT NULL,
  `failure_count` bigint(20) NOT NULL,
  `note` text NOT NULL,
  `version` bigint(20) NOT NULL,
  `last_result` varchar(32) NOT NULL DEFAULT '',
  `last_failure_at` bigint(20) NOT NULL DEFAULT 0,
  `consecutive_failures` int(11) NOT NULL DEFAULT 0,
  `paused_by` varchar(300) NOT NULL DEFAULT '',
  PRIMARY KEY (`task_id`),
  KEY `idx_task_runtime_next` (`next_trigger_time`),
  KEY `idx_task_runtime_failed` (`last_failure_at`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE `workflow` (
  `name` varchar(255) NOT NULL,
  `version` int(11) NOT NULL,
  `grp` varchar(255) NOT NULL DEFAULT '',
  `paused` tinyint(4) NOT NULL DEFAULT 0,
  `next_fire` bigint(20) NOT NULL DEFAULT 0,
  `created_at` bigint(20) NOT NULL,
  `updated_at` bigint(20) NOT NULL,
  PRIMARY KEY (`name`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE `workflow_backfill` (
  `workflow` varchar(255) NOT NULL,
  `from_ms` bigint(20) NOT NULL,
  `to_ms` bigint(20) NOT NULL,
  `parallel` int(11) NOT NULL,
  `cron` varchar(255) NOT NULL,
  `timezone` varchar(64) NOT NULL,
  `total` int(11) NOT NULL,
  `next_fire` bigint(20) NOT NULL,
  `started` int(11) NOT NULL,
  `skipped` int(11) NOT NULL,
  `state` varchar(32) NOT NULL,
  `actor` varchar(255) NOT NULL,
  `created_at` bigint(20) NOT NULL,
  `updated_at` bigint(20) NOT NULL,
  `ended_at` bigint(20) NOT NULL DEFAULT 0,
  PRIMARY KEY (`workflow`),
  KEY `idx_workflow_backfill_state` (`state`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE `workflow_run` (
  `id` varchar(128) NOT NULL,
  `workflow` varchar(255) NOT NULL,
  `version` int(11) NOT NULL,
  `scheduled_at` bigint(20) NOT NULL,
  `trig` varchar(32) NOT NULL,
  `params` mediumtext NOT NULL,
  `state` varchar(32) NOT NULL,
  `created_at` bigint(20) NOT NULL,
  `ended_at` bigint(20) NOT NULL DEFAULT 0,
  `error` text NOT NULL,
  PRIMARY KEY (`id`),
  KEY `idx_workflow_run_sched` (`workflow`,`scheduled_at`),
  KEY `idx_workflow_run_state` (`state`,`created_at`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE `workflow_step` (
  `run_id` varchar(128) NOT NULL,
  `step` varchar(255) NOT NULL,
  `idx` int(11) NOT NULL,
  `attempt` int(11) NOT NULL,
  `state` varchar(32) NOT NULL,
  `ticket` varchar(128) NOT NULL DEFAULT '',
  `started_at` bigint(20) NOT NULL DEFAULT 0,
  `ended_at` bigint(20) NOT NULL DEFAULT 0,
  `output` mediumtext NOT NULL,
  `error` text NOT NULL,
  `items` int(11) NOT NULL DEFAULT 0,
  PRIMARY KEY (`run_id`,`step`,`idx`,`attempt`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE `workflow_version` (
  `name` varchar(255) NOT NULL,
  `version` int(11) NOT NULL,
  `spec` mediumtext NOT NULL,
  `created_at` bigint(20) NOT NULL,
  PRIMARY KEY (`name`,`version`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;





INSERT INTO `executor` (`app`, `address`, `protocol`, `handlers`, `registered_at`, `last_heartbeat`, `status`, `dispatch_key`, `incarnation`) VALUES ('billing', '10.0.0.7:9100', 'http', '["invoice","refund"]', 1767513600000, 1767599999000, 'alive', '5f0c2b8e9d4a7f6e1b3c5d7e9f0a2b4c6d8e0f1a3b5c7d9e1f2a4b6c8d0e2f4a', '3f9a0c1d2e4b5a6978f0e1d2c3b4a596');
INSERT INTO `executor` (`app`, `address`, `protocol`, `handlers`, `registered_at`, `last_heartbeat`, `status`, `dispatch_key`, `incarnation`) VALUES ('billing', '10.0.0.9:9100', 'http', '["invoice"]', 1767596400000, 1767599670000, 'lost', '', '');

INSERT INTO `lease` (`name`, `holder`, `epoch`, `expiry`) VALUES ('primary', 'axe-b:8080', 2, '2026-12-06 13:00:37.480694');
INSERT INTO `lease` (`name`, `holder`, `epoch`, `expiry`) VALUES ('primary#fence', '', 2, '1970-01-01 00:00:00.000000');




INSERT INTO `schema_migrations` (`version`, `name`) VALUES (1, 'initial schema');
INSERT INTO `schema_migrations` (`version`, `name`) VALUES (2, 'index open manual runs only');
INSERT INTO `schema_migrations` (`version`, `name`) VALUES (3, 'high availability: lease by the database clock, nodes, on_lost');
INSERT INTO `schema_migrations` (`version`, `name`) VALUES (4, 'cron dialect per task');
INSERT INTO `schema_migrations` (`version`, `name`) VALUES (5, 'retention');
INSERT INTO `schema_migrations` (`version`, `name`) VALUES (6, 'sensitive params');
INSERT INTO `schema_migrations` (`version`, `name`) VALUES (7, 'one index for open manual runs and the pruner');
INSERT INTO `schema_migrations` (`version`, `name`) VALUES (8, 'cron day fields as cron combines them');
INSERT INTO `schema_migrations` (`version`, `name`) VALUES (9, 'executor dispatch keys');
INSERT INTO `schema_migrations` (`version`, `name`) VALUES (10, 'last result per task, minute statistics');
INSERT INTO `schema_migrations` (`version`, `name`) VALUES (11, 'pause on failure');
INSERT INTO `schema_migrations` (`version`, `name`) VALUES (12, 'jitter');
INSERT INTO `schema_migrations` (`version`, `name`) VALUES (13, 'concurrency limits');
INSERT INTO `schema_migrations` (`version`, `name`) VALUES (14, 'backfills');
INSERT INTO `schema_migrations` (`version`, `name`) VALUES (15, 'overlap and catch-up');
INSERT INTO `schema_migrations` (`version`, `name`) VALUES (16, 'executor incarnations');
INSERT INTO `schema_migrations` (`version`, `name`) VALUES (17, 'pause origin');
INSERT INTO `schema_migrations` (`version`, `name`) VALUES (18, 'workflows');
INSERT INTO `schema_migrations` (`version`, `name`) VALUES (19, 'run params');
INSERT INTO `schema_migrations` (`version`, `name`) VALUES (20, 'concurrency slots across nodes');
INSERT INTO `schema_migrations` (`version`, `name`) VALUES (21, 'workflow backfills');
INSERT INTO `schema_migrations` (`version`, `name`) VALUES (22, 'rate demand across nodes');

INSERT INTO `task_action` (`id`, `task_id`, `task_name`, `ticket`, `action`, `from_state`, `to_state`, `actor`, `at`, `detail`) VALUES (1, 1, 'nightly-report', 'fx-nightly-1', 'fire', 'SCHEDULED', 'RUNNING', 'scheduler', 1767578400000, '');
INSERT INTO `task_action` (`id`, `task_id`, `task_name`, `ticket`, `action`, `from_state`, `to_state`, `actor`, `at`, `detail`) VALUES (2, 1, 'nightly-report', 'fx-nightly-1', 'success', 'RUNNING', 'SCHEDULED', 'scheduler', 1767578404200, '');
INSERT INTO `task_action` (`id`, `task_id`, `task_name`, `ticket`, `action`, `from_state`, `to_state`, `actor`, `at`, `detail`) VALUES (3, 2, 'invoice-run', 'fx-invoice-3', 'fire', 'SCHEDULED', 'RUNNING', 'scheduler', 1767600000000, '');
INSERT INTO `task_action` (`id`, `task_id`, `task_name`, `ticket`, `action`, `from_state`, `to_state`, `actor`, `at`, `detail`) VALUES (4, 4, 'retry-export', 'fx-export-2', 'retry', 'RUNNING', 'RETRYING', 'scheduler', 1767600035816, 'attempt 2 of 6');
INSERT INTO `task_action` (`id`, `task_id`, `task_name`, `ticket`, `action`, `from_state`, `to_state`, `actor`, `at`, `detail`) VALUES (5, 6, 'purge-cache', '', 'pause', 'WAITING', 'PAUSED', 'alice', 1767599999900, 'paused for the migration window');
INSERT INTO `task_action` (`id`, `task_id`, `task_name`, `ticket`, `action`, `from_state`, `to_state`, `actor`, `at`, `detail`) VALUES (6, 9, 'long-import', 'fx-import-1', 'kill', 'RUNNING', 'KILLED', 'bob', 1767598200000, '');
INSERT INTO `task_action` (`id`, `task_id`, `task_name`, `ticket`, `action`, `from_state`, `to_state`, `actor`, `at`, `detail`) VALUES (7, 0, '', '', 'executor_lost', '', '', 'scheduler', 1767599700500, 'billing@10.0.0.9:9100 missed its heartbeats');

INSERT INTO `task_def` (`id`, `name`, `grp`, `trigger_type`, `cron`, `delay_ms`, `depends_on`, `depends_mode`, `timezone`, `timeout_sec`, `retry_count`, `retry_interval_sec`, `priority`, `callback`, `params`, `misfire_policy`, `paused`, `created_at`, `updated_at`, `on_lost`, `cron_dialect`, `retain_history_ms`, `retain_finished_ms`, `sensitive_params`, `pause_after_failures`, `jitter_sec`, `concurrency_key`, `overlap_policy`, `catchup_window_sec`, `rate_key`) VALUES (1, 'nightly-report', 'reports', 'cron', '0 2 * * *', 0, '', '', 'Europe/Berlin', 600, 3, 60, 5, '{"type":"http","url":"http://127.0.0.1:8081/hook"}', '{"format":"pdf","days":7}', 'fire_once', 0, 1766822400000, 1766822401000, 'resend', 'unix', 2592000000, 604800000, '["format"]', 5, 120, 'report-db', 'buffer_all', 3600, '');
INSERT INTO `task_def` (`id`, `name`, `grp`, `trigger_type`, `cron`, `delay_ms`, `depends_on`, `depends_mode`, `timezone`, `timeout_sec`, `retry_count`, `retry_interval_sec`, `priority`, `callback`, `params`, `misfire_policy`, `paused`, `created_at`, `updated_at`, `on_lost`, `cron_dialect`, `retain_history_ms`, `retain_finished_ms`, `sensitive_params`, `pause_after_failures`, `jitter_sec`, `concurrency_key`, `overlap_policy`, `catchup_window_sec`, `rate_key`) VALUES (2, 'invoice-run', 'billing', 'cron', '*/5 * * * *', 0, '', '', 'UTC', 120, 0, 0, 9, '{"type":"executor","app":"billing","handler":"invoice","route":"least_busy"}', '', 'skip', 0, 1766908800000, 1766908801000, '', 'unix', 0, 0, '', 3, 30, 'ledger', 'skip', 0, '');
INSERT INTO `task_def` (`id`, `name`, `grp`, `trigger_type`, `cron`, `delay_ms`, `depends_on`, `depends_mode`, `timezone`, `timeout_sec`, `retry_count`, `retry_interval_sec`, `priority`, `callback`, `params`, `misfire_policy`, `paused`, `created_at`, `updated_at`, `on_lost`, `cron_dialect`, `retain_history_ms`, `retain_finished_ms`, `sensitive_params`, `pause_after_failures`, `jitter_sec`, `concurrency_key`, `overlap_policy`, `catchup_window_sec`, `rate_key`) VALUES (3, 'welcome-mail', 'mail', 'delay', '', 90000, '', '', 'UTC', 30, 0, 0, 0, '{"type":"http","url":"http://127.0.0.1:8081/hook"}', '', 'fire_once', 0, 1766995200000, 1766995201000, 'fail', '', 0, 3600000, '', 0, 0, '', '', 0, '');
INSERT INTO `task_def` (`id`, `name`, `grp`, `trigger_type`, `cron`, `delay_ms`, `depends_on`, `depends_mode`, `timezone`, `timeout_sec`, `retry_count`, `retry_interval_sec`, `priority`, `callback`, `params`, `misfire_policy`, `paused`, `created_at`, `updated_at`, `on_lost`, `cron_dialect`, `retain_history_ms`, `retain_finished_ms`, `sensitive_params`, `pause_after_failures`, `jitter_sec`, `concurrency_key`, `overlap_policy`, `catchup_window_sec`, `rate_key`) VALUES (4, 'retry-export', 'mail', 'delay', '', 5000, '', '', 'UTC', 10, 5, 30, 0, '{"type":"executor","app":"billing","handler":"invoice","route":"failover"}', '', 'fire_once', 0, 1767081600000, 1767081601000, '', '', 0, 0, '', 0, 0, '', '', 0, '');
INSERT INTO `task_def` (`id`, `name`, `grp`, `trigger_type`, `cron`, `delay_ms`, `depends_on`, `depends_mode`, `timezone`, `timeout_sec`, `retry_count`, `retry_interval_sec`, `priority`, `callback`, `params`, `misfire_policy`, `paused`, `created_at`, `updated_at`, `on_lost`, `cron_dialect`, `retain_history_ms`, `retain_finished_ms`, `sensitive_params`, `pause_after_failures`, `jitter_sec`, `concurrency_key`, `overlap_policy`, `catchup_window_sec`, `rate_key`) VALUES (5, 'rebuild-index', 'ops', 'manual', '', 0, '', '', 'Asia/Tokyo', 3600, 0, 0, 0, '{"type":"executor","app":"billing","handler":"invoice"}', '["full"]', 'fire_once', 0, 1767168000000, 1767168001000, '', '', 0, 0, '', 0, 0, '', '', 0, '');
INSERT INTO `task_def` (`id`, `name`, `grp`, `trigger_type`, `cron`, `delay_ms`, `depends_on`, `depends_mode`, `timezone`, `timeout_sec`, `retry_count`, `retry_interval_sec`, `priority`, `callback`, `params`, `misfire_policy`, `paused`, `created_at`, `updated_at`, `on_lost`, `cron_dialect`, `retain_history_ms`, `retain_finished_ms`, `sensitive_params`, `pause_after_failures`, `jitter_sec`, `concurrency_key`, `overlap_policy`, `catchup_window_sec`, `rate_key`) VALUES (6, 'purge-cache', 'ops', 'manual', '', 0, '', '', 'UTC', 60, 0, 0, 0, '{"type":"http","url":"http://127.0.0.1:8081/hook"}', '', 'fire_once', 1, 1767254400000, 1767254401000, '', '', 0, 0, '', 0, 0, '', '', 0, '');
INSERT INTO `task_def` (`id`, `name`, `grp`, `trigger_type`, `cron`, `delay_ms`, `depends_on`, `depends_mode`, `timezone`, `timeout_sec`, `retry_count`, `retry_interval_sec`, `priority`, `callback`, `params`, `misfire_policy`, `paused`, `created_at`, `updated_at`, `on_lost`, `cron_dialect`, `retain_history_ms`, `retain_finished_ms`, `sensitive_params`, `pause_after_failures`, `jitter_sec`, `concurrency_key`, `overlap_policy`, `catchup_window_sec`, `rate_key`) VALUES (7, 'publish-report', 'reports', 'dependency', '', 0, '["nightly-report","welcome-mail"]', 'all', 'UTC', 60, 0, 0, 2, '{"type":"executor","app":"billing","handler":"invoice","route":"consistent_hash"}', '', 'fire_once', 0, 1767340800000, 1767596400000, '', '', 0, 0, '', 0, 0, '', '', 0, '');
INSERT INTO `task_def` (`id`, `name`, `grp`, `trigger_type`, `cron`, `delay_ms`, `depends_on`, `depends_mode`, `timezone`, `timeout_sec`, `retry_count`, `retry_interval_sec`, `priority`, `callback`, `params`, `misfire_policy`, `paused`, `created_at`, `updated_at`, `on_lost`, `cron_dialect`, `retain_history_ms`, `retain_finished_ms`, `sensitive_params`, `pause_after_failures`, `jitter_sec`, `concurrency_key`, `overlap_policy`, `catchup_window_sec`, `rate_key`) VALUES (8, 'notify-finance', 'billing', 'dependency', '', 0, '["invoice-run"]', 'any', 'UTC', 45, 1, 5, 0, '{"type":"executor","app":"billing","handler":"invoice","route":"random"}', '', 'skip', 0, 1767427200000, 1767427201000, '', '', 0, 0, '', 0, 0, '', '', 0, '');
INSERT INTO `task_def` (`id`, `name`, `grp`, `trigger_type`, `cron`, `delay_ms`, `depends_on`, `depends_mode`, `timezone`, `timeout_sec`, `retry_count`, `retry_interval_sec`, `priority`, `callback`, `params`, `misfire_policy`, `paused`, `created_at`, `updated_at`, `on_lost`, `cron_dialect`, `retain_history_ms`, `retain_finished_ms`, `sensitive_params`, `pause_after_failures`, `jitter_sec`, `concurrency_key`, `overlap_policy`, `catchup_window_sec`, `rate_key`) VALUES (9, 'long-import', 'ops', 'cron', '0 30 3 ? * MON', 0, '', '', 'America/New_York', 7200, 0, 0, 0, '{"type":"executor","app":"billing","handler":"invoice","route":"round_robin"}', '', 'fire_once', 0, 1767513600000, 1767513601000, '', 'quartz', 0, 0, '', 0, 0, '', 'cancel_other', 0, '');

INSERT INTO `task_dep` (`task_id`, `upstream_name`) VALUES (7, 'nightly-report');
INSERT INTO `task_dep` (`task_id`, `upstream_name`) VALUES (7, 'welcome-mail');
INSERT INTO `task_dep` (`task_id`, `upstream_name`) VALUES (8, 'invoice-run');

INSERT INTO `task_run` (`ticket`, `task_id`, `task_name`, `kind`, `attempt`, `scheduled_at`, `dispatched_at`, `executor`, `ended_at`, `result`, `error`, `duration_ms`, `output`, `detail`, `params`) VALUES ('fx-export-1', 4, 'retry-export', 'scheduled', 1, 1767600005000, 1767600005004, 'billing@10.0.0.7:9100', 1767600015004, 'failed', 'exit status 3', 10000, 'line 1\nline 2: it\'s "quoted" \\ and ; ends here;\nexport failed', '', NULL);
INSERT INTO `task_run` (`ticket`, `task_id`, `task_name`, `kind`, `attempt`, `scheduled_at`, `dispatched_at`, `executor`, `ended_at`, `result`, `error`, `duration_ms`, `output`, `detail`, `params`) VALUES ('fx-export-2', 4, 'retry-export', 'scheduled', 2, 1767600035000, 1767600035004, 'billing@10.0.0.7:9100', 1767600035816, 'failed', 'HTTP 500: upstream said no', 812, '', '', NULL);
INSERT INTO `task_run` (`ticket`, `task_id`, `task_name`, `kind`, `attempt`, `scheduled_at`, `dispatched_at`, `executor`, `ended_at`, `result`, `error`, `duration_ms`, `output`, `detail`, `params`) VALUES ('fx-import-1', 9, 'long-import', 'scheduled', 1, 1767596400000, 1767596400004, 'billing@10.0.0.7:9100', 1767598200004, 'killed', 'executor: run killed', 1800000, 'imported 120000 rows, then a tab	 and ünïcödé', '', NULL);
INSERT INTO `task_run` (`ticket`, `task_id`, `task_name`, `kind`, `attempt`, `scheduled_at`, `dispatched_at`, `executor`, `ended_at`, `result`, `error`, `duration_ms`, `output`, `detail`, `params`) VALUES ('fx-invoice-2', 2, 'invoice-run', 'scheduled', 1, 1767599700000, 1767599700004, 'billing@10.0.0.7:9100', 1767599700004, 'lost', 'executor billing@10.0.0.7:9100 lost with the run in flight', 0, '', '', NULL);
INSERT INTO `task_run` (`ticket`, `task_id`, `task_name`, `kind`, `attempt`, `scheduled_at`, `dispatched_at`, `executor`, `ended_at`, `result`, `error`, `duration_ms`, `output`, `detail`, `params`) VALUES ('fx-invoice-3', 2, 'invoice-run', 'scheduled', 1, 1767600000000, 1767600000004, 'billing@10.0.0.7:9100', 0, 'running', '', 0, '', '', NULL);
INSERT INTO `task_run` (`ticket`, `task_id`, `task_name`, `kind`, `attempt`, `scheduled_at`, `dispatched_at`, `executor`, `ended_at`, `result`, `error`, `duration_ms`, `output`, `detail`, `params`) VALUES ('fx-nightly-0', 1, 'nightly-report', 'scheduled', 1, 1767492000000, 1767492000004, '', 1767492600004, 'timeout', 'deadline exceeded after 600s', 600000, '', '', NULL);
INSERT INTO `task_run` (`ticket`, `task_id`, `task_name`, `kind`, `attempt`, `scheduled_at`, `dispatched_at`, `executor`, `ended_at`, `result`, `error`, `duration_ms`, `output`, `detail`, `params`) VALUES ('fx-nightly-1', 1, 'nightly-report', 'scheduled', 1, 1767578400000, 1767578400004, '', 1767578404200, 'success', '', 4196, '', '', NULL);
INSERT INTO `task_run` (`ticket`, `task_id`, `task_name`, `kind`, `attempt`, `scheduled_at`, `dispatched_at`, `executor`, `ended_at`, `result`, `error`, `duration_ms`, `output`, `detail`, `params`) VALUES ('fx-notify-1', 8, 'notify-finance', 'scheduled', 1, 1767599700000, 1767599700004, 'billing@10.0.0.7:9100', 1767599701004, 'failed', 'connection refused', 1000, '', 'released by fx-invoice-2', NULL);
INSERT INTO `task_run` (`ticket`, `task_id`, `task_name`, `kind`, `attempt`, `scheduled_at`, `dispatched_at`, `executor`, `ended_at`, `result`, `error`, `duration_ms`, `output`, `detail`, `params`) VALUES ('fx-purge-1', 6, 'purge-cache', 'scheduled', 1, 1767592800000, 1767592800004, '', 1767592800004, 'skipped', '', 0, '', 'misfire: skipped', NULL);
INSERT INTO `task_run` (`ticket`, `task_id`, `task_name`, `kind`, `attempt`, `scheduled_at`, `dispatched_at`, `executor`, `ended_at`, `result`, `error`, `duration_ms`, `output`, `detail`, `params`) VALUES ('fx-rebuild-m0', 5, 'rebuild-index', 'manual', 1, 1767513600000, 1767513600004, 'billing@10.0.0.7:9100', 1767516700004, 'success', '', 3100000, '', '', NULL);
INSERT INTO `task_run` (`ticket`, `task_id`, `task_name`, `kind`, `attempt`, `scheduled_at`, `dispatched_at`, `executor`, `ended_at`, `result`, `error`, `duration_ms`, `output`, `detail`, `params`) VALUES ('fx-rebuild-m1', 5, 'rebuild-index', 'manual', 1, 1767600001000, 1767600001004, 'billing@10.0.0.7:9100', 0, 'running', '', 0, '', 'started by carol', NULL);
INSERT INTO `task_run` (`ticket`, `task_id`, `task_name`, `kind`, `attempt`, `scheduled_at`, `dispatched_at`, `executor`, `ended_at`, `result`, `error`, `duration_ms`, `output`, `detail`, `params`) VALUES ('fx-welcome-1', 3, 'welcome-mail', 'scheduled', 1, 1767600090000, 1767600090004, '', 1767600091250, 'success', '', 1246, '', '', NULL);

INSERT INTO `task_runtime` (`task_id`, `state`, `current_ticket`, `attempt`, `next_trigger_time`, `last_trigger_time`, `last_end_time`, `last_executor`, `success_count`, `failure_count`, `note`, `version`, `last_result`, `last_failure_at`, `consecutive_failures`, `paused_by`) VALUES (1, 'SCHEDULED', '', 0, 1767664800000, 1767578400000, 1767578404200, '', 41, 2, '', 2, 'success', 1765008000000, 0, '');
INSERT INTO `task_runtime` (`task_id`, `state`, `current_ticket`, `attempt`, `next_trigger_time`, `last_trigger_time`, `last_end_time`, `last_executor`, `success_count`, `failure_count`, `note`, `version`, `last_result`, `last_failure_at`, `consecutive_failures`, `paused_by`) VALUES (2, 'RUNNING', 'fx-invoice-3', 1, 1767600000000, 1767600000000, 0, 'billing@10.0.0.7:9100', 2, 0, '', 2, '', 0, 0, '');
INSERT INTO `task_runtime` (`task_id`, `state`, `current_ticket`, `attempt`, `next_trigger_time`, `last_trigger_time`, `last_end_time`, `last_executor`, `success_count`, `failure_count`, `note`, `version`, `last_result`, `last_failure_at`, `consecutive_failures`, `paused_by`) VALUES (3, 'SUCCESS', '', 0, 0, 1767600090000, 1767600091250, '', 1, 0, '', 2, 'success', 0, 0, '');
INSERT INTO `task_runtime` (`task_id`, `state`, `current_ticket`, `attempt`, `next_trigger_time`, `last_trigger_time`, `last_end_time`, `last_executor`, `success_count`, `failure_count`, `note`, `version`, `last_result`, `last_failure_at`, `consecutive_failures`, `paused_by`) VALUES (4, 'RETRYING', '', 2, 1767600065000, 1767600005000, 1767600015000, 'billing@10.0.0.8:9100', 0, 2, '', 2, 'timeout', 1767600015000, 1, '');
INSERT INTO `task_runtime` (`task_id`, `state`, `current_ticket`, `attempt`, `next_trigger_time`, `last_trigger_time`, `last_end_time`, `last_executor`, `success_count`, `failure_count`, `note`, `version`, `last_result`, `last_failure_at`, `consecutive_failures`, `paused_by`) VALUES (5, 'WAITING', '', 0, 0, 0, 0, '', 0, 0, '', 1, '', 0, 0, '');
INSERT INTO `task_runtime` (`task_id`, `state`, `current_ticket`, `attempt`, `next_trigger_time`, `last_trigger_time`, `last_end_time`, `last_executor`, `success_count`, `failure_count`, `note`, `version`, `last_result`, `last_failure_at`, `consecutive_failures`, `paused_by`) VALUES (6, 'PAUSED', '', 0, 0, 0, 0, '', 0, 1, 'paused for the migration window', 2, '', 0, 0, 'task');
INSERT INTO `task_runtime` (`task_id`, `state`, `current_ticket`, `attempt`, `next_trigger_time`, `last_trigger_time`, `last_end_time`, `last_executor`, `success_count`, `failure_count`, `note`, `version`, `last_result`, `last_failure_at`, `consecutive_failures`, `paused_by`) VALUES (7, 'WAITING', '', 0, 0, 0, 0, '', 0, 0, '', 1, '', 0, 0, '');
INSERT INTO `task_runtime` (`task_id`, `state`, `current_ticket`, `attempt`, `next_trigger_time`, `last_trigger_time`, `last_end_time`, `last_executor`, `success_count`, `failure_count`, `note`, `version`, `last_result`, `last_failure_at`, `consecutive_failures`, `paused_by`) VALUES (8, 'FAILED', '', 1, 0, 1767599700000, 1767599701000, 'billing@10.0.0.7:9100', 0, 3, '', 2, 'failed', 1767599701000, 2, '');
INSERT INTO `task_runtime` (`task_id`, `state`, `current_ticket`, `attempt`, `next_trigger_time`, `last_trigger_time`, `last_end_time`, `last_executor`, `success_count`, `failure_count`, `note`, `version`, `last_result`, `last_failure_at`, `consecutive_failures`, `paused_by`) VALUES (9, 'KILLED', '', 0, 1768204800000, 1767596400000, 1767598200000, 'billing@10.0.0.8:9100', 0, 0, 'killed by an operator', 2, 'killed', 0, 0, '');






