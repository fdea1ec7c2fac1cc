"""Stand-ins for the outside world on one machine: an SMTP sink and a Stripe-compatible
endpoint, used when no real SMTP server or Stripe key is configured, and by the tests."""
