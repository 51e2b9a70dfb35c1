"""What a run is made of: the launch request, variants, the pickled payload and what it may
import, code snapshots, the bundle and run folder, commands as runs, the job side packed, and
git facts. Depends on ``settings`` only."""
