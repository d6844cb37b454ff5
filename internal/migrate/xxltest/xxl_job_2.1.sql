-- xxl_job_group and xxl_job_info as XXL-JOB 2.1 introduced them, when it left Quartz: the
-- schedule is job_cron, whether a job runs is trigger_status, and a group has an `order`
-- column and no update_time.
CREATE TABLE xxl_job_group (
  id INT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  app_name VARCHAR(64) NOT NULL,
  title VARCHAR(12) NOT NULL,
  `order` INT NOT NULL DEFAULT 0,
  address_type TINYINT NOT NULL DEFAULT 0,
  address_list VARCHAR(512) NULL
);
CREATE TABLE xxl_job_info (
  id INT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  job_group INT NOT NULL,
  job_cron VARCHAR(128) NOT NULL,
  job_desc VARCHAR(255) NOT NULL,
  add_time DATETIME NULL,
  update_time DATETIME NULL,
  author VARCHAR(64) NULL,
  alarm_email VARCHAR(255) NULL,
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
