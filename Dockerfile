# syntax=docker/dockerfile:1
# Build: docker build -t pacer .
# Run:   docker run --rm -e PACER_KAFKA_BROKERS=... -e PACER_REDIS_URL=... \
#          -e PACER_WHATSAPP_TOKEN=... pacer run --channel whatsapp
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/pacer ./cmd/pacer

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/pacer /usr/local/bin/pacer
USER nonroot:nonroot
EXPOSE 9464
ENTRYPOINT ["/usr/local/bin/pacer"]
CMD ["run", "--channel", "whatsapp"]
