"""The work API, /api/v1/tasks/ and /api/v1/schedules/: tasks and sessions together (a session is a
task of kind session, submitted, listed and shown through the same endpoints), so it stands with
sessions, the top of the work layer (docs/architecture.md). /api/v1/compute-resources/ lists where
a person may submit, with the work waiting and running in each."""
