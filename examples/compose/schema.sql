-- The compose demo's shop, created by the postgres image at its first start.
CREATE TABLE customers (
    id         bigserial PRIMARY KEY,
    name       text NOT NULL,
    email      text NOT NULL,
    phone      text,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE orders (
    id          bigserial PRIMARY KEY,
    customer_id bigint NOT NULL REFERENCES customers (id),
    status      text NOT NULL DEFAULT 'new',
    total       numeric(12,2) NOT NULL,
    note        text,
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- The transactional outbox (outbox.Writer{}.DDL()): the outbox service writes its events
-- here in the order's transaction and deletes them again; cdcd relays the inserts.
CREATE TABLE IF NOT EXISTS public.outbox (
  id uuid PRIMARY KEY,
  aggregatetype text NOT NULL,
  aggregateid text NOT NULL,
  type text NOT NULL,
  payload jsonb
);

INSERT INTO customers (name, email, phone)
SELECT 'customer ' || g, 'customer' || g || '@example.com', '+1-555-' || lpad(g::text, 4, '0')
FROM generate_series(1, 200) g;

INSERT INTO orders (customer_id, total, note)
SELECT 1 + (g % 200), round((random() * 500)::numeric, 2), 'seed order ' || g
FROM generate_series(1, 1000) g;
