// FerryHTTP
