"""What every room stands on, and which stands on no other room: the errors users
see, keeping secrets out of output, queue names, libpq settings, e-mail addresses,
the external services' settings (SMTP, Stripe), and tracing.
"""
