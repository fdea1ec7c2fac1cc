"""The training scenario the dashboard narrates: the article's lease timeline, step by step."""
