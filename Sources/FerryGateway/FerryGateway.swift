// FerryGateway
