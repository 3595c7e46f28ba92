-- SPDX-License-Identifier: MIT
-- The shop's own tables (the outbox tables come from `errand outbox install`).
-- Applied by shop_setup; every statement may run again.

CREATE TABLE IF NOT EXISTS orders (
    id               uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    request_key      text UNIQUE,          -- the client's Idempotency-Key of POST /orders
    tenant           text NOT NULL,
    customer_id      text NOT NULL,
    amount           bigint NOT NULL CHECK (amount > 0),   -- in cents
    status           text NOT NULL DEFAULT 'placed',       -- placed, paid, cancelled
    shipment_id      text,
    created_at       timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE IF NOT EXISTS payments (
    order_id         uuid PRIMARY KEY REFERENCES orders (id),
    authorization_id text NOT NULL,
    amount           bigint NOT NULL,
    status           text NOT NULL DEFAULT 'authorized',   -- authorized, captured, voided
    capture_id       text,
    captured_at      timestamptz
);

CREATE TABLE IF NOT EXISTS loyalty_accounts (
    customer_id      text PRIMARY KEY,
    points           bigint NOT NULL DEFAULT 0
);

-- The daily sales roll-up (shop_rollup): one row per day, rewritten whole.
CREATE TABLE IF NOT EXISTS daily_sales (
    day              date PRIMARY KEY,
    orders           bigint NOT NULL,
    amount           bigint NOT NULL
);
