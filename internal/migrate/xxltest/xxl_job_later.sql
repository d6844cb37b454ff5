-- xxl_job_group and xxl_job_info after 2.3, as reported against axe: 2.3's columns, with a
-- group's name in place of its title and an access token of its own. The importer reads by
-- column, so this checks that added and renamed columns it does not map change nothing.
CREATE TABLE xxl_job_group (
  id INT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  app_name VARCHAR(64) NOT NULL,
  name VARCHAR(64) NOT NULL,
  access_token VARCHAR(255) NULL,
  address_type TINYINT NOT NULL DEFAULT 0,
  address_list TEXT NULL,
  update_time DATETIME NULL
);
CREATE TABLE xxl_job_info (
  id INT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  job_group INT NOT NULL,
  job_desc VARCHAR(255) NOT NULL,
  add_time DATETIME NULL,
  update_time DATETIME NULL,
  author VARCHAR(64) NULL,
  alarm_email VARCHAR(255) NULL,
  schedule_type VARCHAR(50) NOT NULL DEFAULT 'NONE',
  schedule_conf VARCHAR(128) NULL,
  misfire_strategy VARCHAR(50) NOT NULL DEFAULT 'DO_NOTHING',
  executor_route_strategy VARCHAR(50) NULL,
  executor_handler VARCHAR(255) NULL,
  executor_param VARCHAR(512) NULL,
  executor_block_strategy VARCHAR(50) NULL,
  executor_timeout INT NOT NULL DEFAULT 0,
  executor_fail_retry_count INT NOT NULL DEFAULT 0,
  glue_type VARCHAR(50) NOT NULL,
  glue_source MEDIUMTEXT NULL,
  glue_remark VARCHAR(128) NULL,
  glue_updatetime DATETIME NULL,
  child_jobid VARCHAR(255) NULL,
  trigger_status TINYINT NOT NULL DEFAULT 0,
  trigger_last_time BIGINT NOT NULL DEFAULT 0,
  trigger_next_time BIGINT NOT NULL DEFAULT 0
);
