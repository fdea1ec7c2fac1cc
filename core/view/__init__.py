"""What `status`, `history`, `advise` and the dashboard read (the board's rows, status,
inspection, queue health, trends, lease advice, jobs no worker runs), and what the
dashboard may ask (control, operator requests).
"""
