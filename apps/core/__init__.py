"""Small shared helpers that every domain app uses (GPU amounts, validation messages)."""
