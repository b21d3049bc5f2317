# cdcd: one static binary (and the compose demo's workload generator and outbox service) in a
# distroless image that runs as a non-root user.
#   docker build -t cdcd .
#   docker run -v cdcd-data:/var/lib/cdcd -v $PWD/cdcd.yaml:/etc/cdcd/cdcd.yaml:ro -p 8089:8089 cdcd
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/cdcd ./cmd/cdcd \
 && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/cdcd-workload ./examples/compose/workload \
 && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/cdcd-outbox-service ./examples/outbox-service \
 && mkdir -p /out/data

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/cdcd /out/cdcd-workload /out/cdcd-outbox-service /usr/local/bin/
# data_dir: the log, the key indexes, the SQLite catalog and the warehouse.
COPY --from=build --chown=65532:65532 /out/data /var/lib/cdcd
USER 65532:65532
VOLUME /var/lib/cdcd
EXPOSE 8089
ENTRYPOINT ["/usr/local/bin/cdcd"]
CMD ["run", "-c", "/etc/cdcd/cdcd.yaml"]
