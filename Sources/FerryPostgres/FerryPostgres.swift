// FerryPostgres
