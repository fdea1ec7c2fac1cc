"""Stand-ins for the outside world on one machine: an SMTP sink and a Stripe-compatible
endpoint, used when no real SMTP server or Stripe key is configured, and by the tests.

- `smtp_sink` (the server) and `smtp_records` (what it keeps);
- `stripe_endpoint` (the server), `stripe_api` (PaymentIntents), `stripe_idempotency`
  (`Idempotency-Key` rules) and `stripe_records` (charges and requests it keeps);
- `stamps`: the `X-Taskboard-*` headers that tie each call to its attempt and deadline;
- `runtime` (what a process runs with, and the dashboard's view of it), `sharing` and
  `registry` (one sink and one endpoint per host, registered in the database).

Only `runtime` knows the dashboard's types: the servers keep their own records.
"""
