-- The compose demo's shop in MariaDB (profile mysql), created by the mariadb image at its
-- first start in the database shop; the user cdc (MARIADB_USER) owns it.
CREATE TABLE customers (
    id         BIGINT AUTO_INCREMENT PRIMARY KEY,
    name       VARCHAR(200) NOT NULL,
    email      VARCHAR(200) NOT NULL,
    created_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
);

CREATE TABLE orders (
    id          BIGINT AUTO_INCREMENT PRIMARY KEY,
    customer_id BIGINT NOT NULL,
    status      VARCHAR(20) NOT NULL DEFAULT 'new',
    total       DECIMAL(12,2) NOT NULL,
    updated_at  TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6)
);

-- Debezium's signal table: INSERT a row to re-read a table while it streams, e.g.
--   INSERT INTO debezium_signal VALUES ('again-1', 'execute-snapshot', '{"data-collections": ["shop.orders"]}');
CREATE TABLE debezium_signal (id VARCHAR(42) PRIMARY KEY, type VARCHAR(32) NOT NULL, data VARCHAR(2048));

-- What cdcd reads the binlog with (the watermark table cdcd_watermark it creates in shop).
GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO 'cdc'@'%';

INSERT INTO customers (name, email)
SELECT CONCAT('customer ', seq), CONCAT('customer', seq, '@example.com') FROM seq_1_to_200;
INSERT INTO orders (customer_id, status, total)
SELECT 1 + seq % 200, ELT(1 + seq % 4, 'new', 'paid', 'shipped', 'delivered'), (seq % 500) + 0.99 FROM seq_1_to_1000;
