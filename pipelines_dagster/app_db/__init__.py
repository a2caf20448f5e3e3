"""The app database: SQLAlchemy models, engine and sessions, Alembic migrations."""
