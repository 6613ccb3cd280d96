"""The Northwind Service Desk demo: an embedded SQLite database (``db``) and the real Python tools
(``tools``) that the bundled workflow library (``workflows/library``) binds its APIs to."""
