# syntax=docker/dockerfile:1
# Build: docker build --build-arg VERSION=$(git describe --always --dirty) -t pacer .
# Run:   docker run --rm -e PACER_KAFKA_BROKERS=... -e PACER_REDIS_URL=... \
#          -e PACER_WHATSAPP_TOKEN=... pacer run --channel whatsapp
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# VERSION: what `pacer version` reports; without it, Go's "(devel)".
ARG VERSION=
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w -X main.version=${VERSION}" -o /out/pacer ./cmd/pacer

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/pacer /usr/local/bin/pacer
USER nonroot:nonroot
# 9464: /metrics, /healthz, /readyz, /status (PACER_METRICS_ADDR);
# 8080: the ingest API of `pacer ingest` (PACER_INGEST_ADDR).
EXPOSE 9464 8080
ENTRYPOINT ["/usr/local/bin/pacer"]
CMD ["run", "--channel", "whatsapp"]
